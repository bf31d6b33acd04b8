#!/usr/bin/env bash
# Tensor-parallel checkpoints with the binaries, as a user moves a run between layouts: a tiny
# model trained for two steps on 2 ranks (dp=2, ZeRO-1: real Adam moments) is resharded to tp=2
# (several shards per split tensor, tp=2 in the layout), which inspect shows and verify passes;
# from there it is resharded between every pair of {dp=1,tp=1}, {tp=2}, {dp=2},
# {tp=2,dp=2,zero=1}, {tp=4}, {tp=2,zero=1} (one of them under mpirun) and `ms-ckpt diff` finds
# every value unchanged; the safetensors export of the tp=2 checkpoint is byte-for-byte that of
# its tp=1 reshard; ms-infer serving the tp=2 and tp=4 checkpoints gives the trained
# checkpoint's tokens; tp=3 (which does not divide the query rows) is refused naming a tensor,
# leaving nothing behind.
# Usage: ckpt_tp_reshard_test.sh <mpirun> <bin dir> <source dir>   (KEEP_WORK=1 keeps its files)
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"
ck="$BIN/ms-ckpt"

shakespeare_plan 16 64 8
"$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
  --set data.plan="$work/s16.plan" --set run.dir="$work/run" "${TINY_MODEL[@]}" \
  --set model.max_seq_len=32 --set train.seq_len=16 --set train.steps=2 \
  --set train.global_batch=4 --set train.micro_batch=2 --set train.eval_every=0 \
  --set train.log_every=1 --set train.mfu_peak_gflops=1 --set parallel.zero=1 \
  --set checkpoint.every=2 --set checkpoint.async=false > "$work/train.txt" 2>&1 ||
  { cat "$work/train.txt"; fail "ms-train exited non-zero"; }
trained="$work/run/checkpoints"

# reshard <from> <to dir> <layout> [mpirun np]: ms-ckpt reshard, failing the test on an error.
reshard() {
  local from=$1 to=$2 layout=$3 launch=()
  [ $# -ge 4 ] && launch=("$MPIRUN" --oversubscribe -np "$4")
  "${launch[@]}" "$ck" reshard "$from" --to "$layout" --output "$to" --max-shard-bytes 65536 \
    > "$work/reshard.txt" 2>&1 || { cat "$work/reshard.txt"; fail "reshard $from to $layout"; }
}
same_values() {
  "$ck" diff "$1" "$2" > "$work/diff.txt" 2>&1 || { cat "$work/diff.txt"; fail "$3"; }
}

reshard "$trained" "$work/tp2" tp=2
"$ck" inspect "$work/tp2" > "$work/inspect.txt"
grep -q "^layout  *tp=2 dp=1 pp=1 ep=1 zero=0 (world 2)" "$work/inspect.txt" ||
  fail "inspect does not show tp=2: $(grep ^layout "$work/inspect.txt")"
"$ck" inspect "$work/tp2" --json > "$work/inspect.json"
python3 - "$work/inspect.json" <<'PY' || fail "the tp=2 checkpoint does not hold tp boxes"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["layout"]["tp"] == 2 and d["layout"]["world"] == 2, d["layout"]
shards = {t["name"]: t["shards"] for t in d["tensors"]}
assert shards["model.layers.0.self_attn.o_proj.weight"] == 2, shards
assert shards["optimizer.exp_avg.model.layers.0.mlp.gate_proj.weight"] >= 2, shards
assert shards["model.norm.weight"] == 1, shards
PY
"$ck" verify "$work/tp2" > /dev/null || fail "verify of the tp=2 checkpoint"
same_values "$trained" "$work/tp2" "reshard to tp=2 changed values"

layouts=(dp=1,tp=1 tp=2 dp=2 tp=2,dp=2,zero=1 tp=4 tp=2,zero=1)
for i in "${!layouts[@]}"; do
  reshard "$work/tp2" "$work/l$i" "${layouts[$i]}"
done
for i in "${!layouts[@]}"; do
  for j in "${!layouts[@]}"; do
    [ "$i" = "$j" ] && continue
    if [ "$i$j" = 03 ]; then reshard "$work/l$i" "$work/p$i$j" "${layouts[$j]}" 2; else
      reshard "$work/l$i" "$work/p$i$j" "${layouts[$j]}"; fi
    same_values "$trained" "$work/p$i$j" "${layouts[$i]} -> ${layouts[$j]} changed values"
  done
done

"$ck" export "$work/tp2" --format safetensors -o "$work/hf_tp2" --max-shard-bytes 1000000 \
  > /dev/null || fail "export of the tp=2 checkpoint"
"$ck" export "$work/l0" --format safetensors -o "$work/hf_tp1" --max-shard-bytes 1000000 \
  > /dev/null || fail "export of the tp=1 checkpoint"
[ -f "$work/hf_tp2/model.safetensors.index.json" ] || fail "the export was not split"
diff -r "$work/hf_tp2" "$work/hf_tp1" > /dev/null || fail "the tp=2 export differs from tp=1's"

cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 6}
JSONL
for c in trained:"$trained" tp2:"$work/tp2" tp4:"$work/l4"; do
  "$BIN/ms-infer" generate --checkpoint "${c#*:}" --prompts "$work/prompts.jsonl" \
    -o "$work/gen_${c%%:*}.jsonl" --no-progress || fail "generate --checkpoint ${c%%:*}"
done
python3 - "$work"/gen_{trained,tp2,tp4}.jsonl <<'PY' || fail "a tp checkpoint serves other tokens"
import json, sys
runs = [[json.loads(l) for l in open(path)] for path in sys.argv[1:]]
want = [(r["id"], r["tokens"], r["text"]) for r in runs[0]]
assert want and want[0][1], runs[0]
for path, run in zip(sys.argv[2:], runs[1:]):
    assert [(r["id"], r["tokens"], r["text"]) for r in run] == want, (path, run, want)
PY

if "$ck" reshard "$work/tp2" --to tp=3 --output "$work/bad" > "$work/bad.txt" 2>&1; then
  fail "tp=3 was accepted"
fi
grep -q 'tp=3: tensor "' "$work/bad.txt" || fail "the tp=3 refusal names no tensor: $(cat "$work/bad.txt")"
[ -z "$(ls -A "$work/bad" 2>/dev/null)" ] || fail "a refused reshard left $(ls -A "$work/bad")"
echo "PASS"
