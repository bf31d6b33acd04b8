#!/usr/bin/env bash
# ms-ckpt as a new user drives it: a small Llama-shaped Hugging Face model (written here with
# Python's standard library) is imported as a checkpoint; inspect and verify read it; export to
# split safetensors and diff against the checkpoint (exit 0); import the export again and diff
# the two checkpoints; a flipped byte makes verify exit 1 naming the file and the tensor; a
# changed tensor makes diff exit 3; reshard to dp=4,zero=1 (alone and under mpirun) diffs equal; list and prune manage a checkpoints/ directory; a
# parallel-block model is refused by export. Exits 77 (skipped) without python3.
# Reshard runs alone and under mpirun with 2 processes.
# Usage: ckpt_cli_test.sh <mpirun> <bin dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
command -v python3 > /dev/null || { echo "SKIP: python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ck="$BIN/ms-ckpt"

# write_hf <dir> <layers>: config.json + model.safetensors of a tiny Llama with seeded weights.
write_hf() {
  python3 - "$1" "$2" <<'PY'
import json, os, random, struct, sys
out, layers = sys.argv[1], int(sys.argv[2])
V, D, F, H, KV = 32, 16, 24, 4, 2
hd = D // H
shapes = [("model.embed_tokens.weight", [V, D])]
for l in range(layers):
    p = f"model.layers.{l}."
    shapes += [(p + "input_layernorm.weight", [D]), (p + "self_attn.q_proj.weight", [H * hd, D]),
               (p + "self_attn.k_proj.weight", [KV * hd, D]), (p + "self_attn.v_proj.weight", [KV * hd, D]),
               (p + "self_attn.o_proj.weight", [D, H * hd]), (p + "post_attention_layernorm.weight", [D]),
               (p + "mlp.gate_proj.weight", [F, D]), (p + "mlp.up_proj.weight", [F, D]),
               (p + "mlp.down_proj.weight", [D, F])]
shapes += [("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
rng = random.Random(7)
header, data = {"__metadata__": {"format": "pt"}}, b""
for name, shape in shapes:
    n = 1
    for s in shape: n *= s
    blob = struct.pack("<%df" % n, *[rng.gauss(0, 0.02) for _ in range(n)])
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
    data += blob
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": D, "intermediate_size": F,
       "num_hidden_layers": layers, "num_attention_heads": H, "num_key_value_heads": KV,
       "vocab_size": V, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
       "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
open(os.path.join(out, "tokenizer.json"), "w").write('{"model": {"type": "BPE"}}')
PY
}

write_hf "$work/hf" 2
"$ck" import "$work/hf" --output "$work/run/checkpoints" > "$work/import.txt" 2>&1 \
  || { cat "$work/import.txt"; fail "import"; }
[ -f "$work/run/checkpoints/step-00000000/manifest.json" ] || fail "no step-00000000"
[ -f "$work/run/checkpoints/step-00000000/tokenizer.json" ] || fail "tokenizer not copied"

"$ck" inspect "$work/run/checkpoints" > "$work/inspect.txt"
grep -q "model.layers.1.mlp.down_proj.weight" "$work/inspect.txt" || fail "inspect lacks a tensor"
"$ck" inspect "$work/run/checkpoints/latest" --json > "$work/inspect.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['step']==0 and d['tensor_count']==21, d['tensor_count']" "$work/inspect.json" \
  || fail "inspect --json"
"$ck" verify "$work/run/checkpoints" > "$work/verify_ok.txt" || fail "verify of an intact checkpoint"
grep -q "^OK " "$work/verify_ok.txt" || fail "verify prints no OK line"

"$ck" export "$work/run/checkpoints" --format safetensors --output "$work/out" \
  --max-shard-bytes 8192 > /dev/null 2>&1 || fail "export"
[ -f "$work/out/model.safetensors.index.json" ] || fail "no index past the size limit"
ls "$work/out"/model-00001-of-0000*.safetensors > /dev/null || fail "no split files"
grep -q '"LlamaForCausalLM"' "$work/out/config.json" || fail "config.json architecture"
cmp -s "$work/hf/tokenizer.json" "$work/out/tokenizer.json" || fail "tokenizer.json not exported"
"$ck" diff "$work/run/checkpoints" "$work/out" > /dev/null || fail "export differs from checkpoint"
"$ck" diff "$work/hf/model.safetensors" "$work/out" > /dev/null || fail "export differs from source"

"$ck" import "$work/out" --output "$work/again" > /dev/null 2>&1 || fail "re-import"
"$ck" diff "$work/run/checkpoints" "$work/again" > /dev/null || fail "round trip not bitwise"

"$ck" reshard "$work/run/checkpoints" --to dp=4,zero=1 --output "$work/rs1" \
  --max-shard-bytes 1024 > /dev/null 2>&1 || fail "reshard"
"$ck" inspect "$work/rs1" --json > "$work/rs1.json"
grep -q '"dp": 4' "$work/rs1.json" || fail "resharded layout not dp=4"
"$ck" diff "$work/run/checkpoints" "$work/rs1" > /dev/null || fail "reshard changed values"
"$MPIRUN" --oversubscribe -np 2 "$ck" reshard "$work/rs1" --to dp=2 --output "$work/rs2" \
  > /dev/null 2>&1 || fail "reshard under mpirun"
ls "$work/rs2/step-00000000"/rank-00001.data > /dev/null || fail "no file of target rank 1"
"$ck" verify "$work/rs2" > /dev/null || fail "verify of the mpirun reshard"
"$ck" diff "$work/run/checkpoints" "$work/rs2" > /dev/null || fail "mpirun reshard changed values"

# A different model: diff exits 3 and names the tensors.
write_hf "$work/hf1" 1
set +e
"$ck" diff "$work/hf/model.safetensors" "$work/hf1/model.safetensors" > "$work/diff.txt" 2>&1
rc=$?
set -e
[ "$rc" = 3 ] || fail "diff of different models exited $rc, wanted 3"
grep -q "only_in_a" "$work/diff.txt" || fail "diff does not list missing tensors"

# A flipped byte: verify exits 1 naming the data file and a tensor.
step="$work/run/checkpoints/step-00000000"
data=$(ls "$step"/*.data | head -1)
printf '\xff\xff\xff\xff' | dd of="$data" bs=1 seek=64 conv=notrunc status=none
set +e
"$ck" verify "$step" > "$work/verify.txt" 2> "$work/verify.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "verify of a damaged checkpoint exited $rc"
grep -q "$(basename "$data") offset .*tensor '" "$work/verify.txt" || fail "verify names no file/tensor"
grep -q "ms-ckpt: error:" "$work/verify.err" || fail "verify error line"

# list and prune: three checkpoints, keep 1 leaves the newest.
for s in 10 20; do
  "$ck" import "$work/hf" --output "$work/many" --step $s > /dev/null 2>&1 || fail "import step $s"
done
"$ck" import "$work/hf" --output "$work/many" --step 5 > /dev/null 2>&1 || fail "import step 5"
"$ck" list "$work/many" > "$work/list.txt"
[ "$(grep -c complete "$work/list.txt")" = 3 ] || fail "list should show 3 complete"
"$ck" prune "$work/many" --keep 1 > /dev/null
[ -d "$work/many/step-00000020" ] || fail "prune removed the newest checkpoint"
[ ! -d "$work/many/step-00000010" ] || fail "prune kept an old checkpoint"

# No Hugging Face equivalent: refused with the key named, nothing written.
sed -i 's/parallel_block: false/parallel_block: true/' "$work/again/step-00000000/manifest.json"
set +e
"$ck" export "$work/again" --output "$work/pb" > /dev/null 2> "$work/pb.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "export of a parallel-block model exited $rc"
grep -q "model.parallel_block" "$work/pb.err" || fail "refusal does not name model.parallel_block"
[ ! -e "$work/pb" ] || fail "a refused export left a directory"
echo "PASS"
