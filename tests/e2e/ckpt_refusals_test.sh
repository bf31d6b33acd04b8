#!/usr/bin/env bash
# ms-ckpt against crafted checkpoints and model directories, as the issue's checks try them:
# shards that overlap or leave a gap, a shape whose element count wraps, a zstd shard claiming
# more than it can hold, a tensor larger than its data file, an index whose weight_map leaves
# the model directory, a config.json claiming layers the weights lack. Every command must exit
# 1 with a message naming the file and the tensor or key, in under 60 s and 1.5 GB of memory,
# and leave no temporary behind; `prune --temporaries` removes what a crash left. Files are
# written with printf alone (no python needed).
# Usage: ckpt_refusals_test.sh <bin dir>
set -euo pipefail
BIN=$1
ck="$BIN/ms-ckpt"
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect_refusal <name> <pattern>... -- <command...>: exit 1, stderr matching every pattern.
expect_refusal() {
  local name=$1; shift
  local patterns=()
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
  shift
  local start=$SECONDS rc=0
  ( ulimit -v 1500000; timeout 60 "$@" ) > "$work/$name.out" 2> "$work/$name.err" || rc=$?
  [ "$rc" = 1 ] || { cat "$work/$name.err"; fail "$name exited $rc, wanted 1"; }
  [ $((SECONDS - start)) -lt 60 ] || fail "$name took $((SECONDS - start)) s"
  grep -q "^ms-ckpt: error:" "$work/$name.err" || fail "$name: no 'ms-ckpt: error:' line"
  for p in "${patterns[@]}"; do
    grep -qF -- "$p" "$work/$name.err" || { cat "$work/$name.err"; fail "$name: no '$p'"; }
  done
}

# step <dir> <tensors json> <data bytes>: a step directory with one data file.
step() {
  mkdir -p "$1"
  printf '{"format_version":1,"step":1,"toolkit_version":"0.1.0","git_revision":"x",'`
    `'"config_yaml":"","layout":{"world":1,"dp":1,"tp":1,"pp":1,"ep":1,"zero":0},'`
    `'"state":{},"tensors":%s}' "$2" > "$1/manifest.json"
  head -c "$3" /dev/zero > "$1/rank-00000.data"
}
shard() {  # shard <offsets> <lengths> <byte offset> <byte length> [codec]
  printf '{"file":"rank-00000.data","offset":%s,"length":%s,"global_offsets":%s,"lengths":%s,'`
    `'"codec":"%s","crc32c":0}' "$3" "$4" "$1" "$2" "${5:-raw}"
}
tensor() { printf '[{"name":"w","dtype":"f32","global_shape":%s,"shards":[%s]}]' "$1" "$2"; }

# Two identical shards covering half of a [4, 3] tensor hold as many elements as the tensor.
half=$(shard "[0,0]" "[2,3]" 0 24)
step "$work/overlap/step-00000001" "$(tensor "[4,3]" "$half,$half")" 24
boxes='tensor "w" of shape [4, 3]: shards overlap: shard [0:2, 0:3] (rank-00000.data offset 0) and shard [0:2, 0:3]'
for cmd in verify inspect; do
  expect_refusal "overlap_$cmd" "$work/overlap/step-00000001/manifest.json" "$boxes" -- \
    "$ck" $cmd "$work/overlap/step-00000001"
done
expect_refusal overlap_diff "$boxes" -- "$ck" diff "$work/overlap/step-00000001" "$work/overlap/step-00000001"
expect_refusal overlap_export "$boxes" -- "$ck" export "$work/overlap/step-00000001" -o "$work/overlap_hf"
[ ! -e "$work/overlap_hf" ] || fail "a refused export left output"
expect_refusal overlap_reshard "$boxes" -- "$ck" reshard "$work/overlap/step-00000001" --to dp=2 -o "$work/rs"
[ -z "$(ls -A "$work/rs" 2>/dev/null)" ] || fail "a refused reshard left $(ls -A "$work/rs")"

step "$work/gap/step-00000001" "$(tensor "[4,3]" "$half")" 24
expect_refusal gap_verify 'shards leave a gap: no shard holds the elements [2:4, 0:3]' -- \
  "$ck" verify "$work/gap/step-00000001"

# [3, 6148914691236517206] has 2 elements modulo 2^64 (8 bytes of f32).
step "$work/wrap/step-00000001" \
  "$(tensor "[3,6148914691236517206]" "$(shard "[0,0]" "[3,6148914691236517206]" 0 8)")" 8
for cmd in verify diff reshard; do
  args=("$work/wrap/step-00000001")
  [ $cmd = diff ] && args+=("$work/wrap/step-00000001")
  [ $cmd = reshard ] && args+=(--to dp=2 -o "$work/rs_wrap")
  expect_refusal "wrap_$cmd" 'tensor "w"' 'dimension 1 is 6148914691236517206, above the limit 2^62' -- \
    "$ck" $cmd "${args[@]}"
done

# 100 stored bytes of zstd cannot hold a 4 GiB box.
step "$work/bomb/step-00000001" \
  "$(tensor "[1048576,1024]" "$(shard "[0,0]" "[1048576,1024]" 0 100 zstd)")" 100
expect_refusal bomb_verify 'a zstd frame of 100 bytes cannot hold the 4294967296 bytes' -- \
  "$ck" verify "$work/bomb/step-00000001"

# 1 TiB of raw f32 claimed by a 48-byte file: refused by the file size before allocating.
step "$work/big/step-00000001" \
  "$(tensor "[274877906944]" "$(shard "[0]" "[274877906944]" 0 1099511627776)")" 48
expect_refusal big_diff 'rank-00000.data: tensor "w"' 'the file has only 48 bytes' -- \
  "$ck" diff "$work/big/step-00000001" "$work/big/step-00000001"
expect_refusal big_reshard 'the file has only 48 bytes' -- \
  "$ck" reshard "$work/big/step-00000001" --to dp=2 -o "$work/rs_big"
[ -z "$(ls -A "$work/rs_big" 2>/dev/null)" ] || fail "a refused reshard left $(ls -A "$work/rs_big")"

# A Hugging Face directory: one real tensor, then a hostile index, then a config claiming
# 10^8 layers.
hf="$work/hf"
mkdir -p "$hf"
header='{"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
n=${#header}
printf "$(printf '\\x%02x\\x%02x\\x00\\x00\\x00\\x00\\x00\\x00' $((n % 256)) $((n / 256)))" > "$hf/model.safetensors"
printf '%s' "$header" >> "$hf/model.safetensors"
head -c 16 /dev/zero >> "$hf/model.safetensors"
printf '{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":24,'`
  `'"num_hidden_layers":100000000,"num_attention_heads":4,"num_key_value_heads":2,'`
  `'"vocab_size":32,"max_position_embeddings":64}' > "$hf/config.json"
expect_refusal config_layers "$hf/config.json implies 900000003 tensors (100000000 layers)" -- \
  "$ck" import "$hf" -o "$work/imported"
printf '{"weight_map":{"model.norm.weight":"../../etc/passwd"}}' > "$hf/model.safetensors.index.json"
expect_refusal index_escape \
  "$hf/model.safetensors.index.json: weight_map['model.norm.weight'] = \"../../etc/passwd\"" -- \
  "$ck" import "$hf" -o "$work/imported"
expect_refusal index_escape_diff "weight_map['model.norm.weight']" -- "$ck" diff "$hf" "$hf"
[ ! -e "$work/imported" ] || fail "a refused import wrote $work/imported"

# What crashed saves and reshards leave: listed, and removed by prune --temporaries.
ckpts="$work/run/checkpoints"
mkdir -p "$ckpts/step-00000001" "$ckpts/.tmp-step-00000002-77" "$ckpts/step-00000003.tmp.99.ab"
cp "$work/gap/step-00000001/manifest.json" "$ckpts/step-00000001/"
printf 'step-00000001\n' > "$ckpts/latest"
printf 'step-000' > "$ckpts/latest.tmp.99.cd"
"$ck" list "$ckpts" > "$work/list.txt"
[ "$(grep -c incomplete "$work/list.txt")" = 3 ] || { cat "$work/list.txt"; fail "list misses temporaries"; }
grep -q "step-00000001 .*<- latest" "$work/list.txt" || fail "list does not mark latest"
"$ck" prune "$ckpts" --keep 1 --temporaries > /dev/null
[ "$(ls -A "$ckpts" | sort | tr '\n' ' ')" = "latest step-00000001 " ] || fail "prune left $(ls -A "$ckpts")"
echo "PASS"
