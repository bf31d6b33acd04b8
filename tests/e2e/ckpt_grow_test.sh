#!/usr/bin/env bash
# ms-ckpt grow as a user runs it: a tiny model (dense and tied; MoE and untied with a routing
# bias and a shared expert) trained for two steps is grown in width and depth;
# ms-infer gives the same greedy tokens from both checkpoints; ms-train resumes from the grown
# one (with the overrides grow prints) and its next step's loss equals the small model's on the
# same batch; after that step the copies of a duplicated neuron differ; `ms-ckpt export` takes
# the grown checkpoint; refusals (head size, grouping, shrinking, output inside the source,
# existing output) exit 1 and write nothing; --restart-schedule writes step 0 and the resumed run
# starts on the same batch.
# Usage: ckpt_grow_test.sh <bin dir> <source dir>
set -euo pipefail
BIN=$1
SRC=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 16 64 8

train() {  # train <run dir> <steps> [extra --set args...]
  local dir=$1 steps=$2
  shift 2
  "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$work/s16.plan" \
    --set run.dir="$dir" --set model.d_model=16 --set model.n_layers=2 --set model.n_heads=2 \
    --set model.n_kv_heads=1 --set model.d_ff=32 --set model.max_seq_len=32 \
    --set train.seq_len=16 --set train.steps="$steps" --set train.global_batch=4 \
    --set train.micro_batch=2 --set train.eval_every=0 --set train.log_every=1 \
    --set train.mfu_peak_gflops=1 --set checkpoint.every=2 --set checkpoint.async=false \
    "$@" > "$dir.txt" 2>&1 || { cat "$dir.txt"; fail "ms-train ($dir) exited non-zero"; }
}

train "$work/small" 2
small="$work/small/checkpoints/step-00000002"
"$BIN/ms-ckpt" grow "$work/small/checkpoints" --to d_model=32,n_layers=3,d_ff=48 \
  --output "$work/grown" > "$work/grow.txt" 2>&1 || { cat "$work/grow.txt"; fail "grow exited $?"; }
grep -q "to d_model=32,n_layers=3,d_ff=48,n_heads=4,n_kv_heads=2 as $work/grown/step-00000002" \
  "$work/grow.txt" || { cat "$work/grow.txt"; fail "grow did not report the grown sizes"; }
read -r -a overrides <<< "$(sed -n 's/^resume training with: //p' "$work/grow.txt")"
[ "${#overrides[@]}" -gt 0 ] || fail "grow printed no resume overrides"
"$BIN/ms-ckpt" verify "$work/grown" > /dev/null || fail "the grown checkpoint does not verify"

# Greedy generation: the same tokens from the small and the grown model.
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 8}
{"id": "b", "prompt": "First Citizen:\nBefore we proceed", "max_tokens": 8}
JSONL
for which in small grown; do
  dir=$small
  [ "$which" = grown ] && dir="$work/grown"
  "$BIN/ms-infer" generate --checkpoint "$dir" --prompts "$work/prompts.jsonl" \
    -o "$work/$which.jsonl" --no-progress || fail "ms-infer on the $which checkpoint exited $?"
done
python3 - "$work/small.jsonl" "$work/grown.jsonl" <<'PY' || fail "greedy tokens differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 2 and all(x["tokens"] for x in a), a
for x, y in zip(a, b):
    assert x["tokens"] == y["tokens"], (x, y)
PY

"$BIN/ms-ckpt" export "$work/grown" -o "$work/hf" > /dev/null || fail "export of the grown checkpoint"
python3 - "$work/hf/config.json" <<'PY' || fail "exported config.json"
import json, sys
c = json.load(open(sys.argv[1]))
assert (c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]) == (32, 3, 48), c
assert (c["num_attention_heads"], c["num_key_value_heads"]) == (4, 2), c
assert abs(c["rms_norm_eps"] - 5e-6) < 1e-12, c
PY

# One more step: the small model from its checkpoint, the grown one from the grown checkpoint.
# The loader position is kept, so both see the same batch and compute the same loss.
train "$work/small" 3
train "$work/big" 3 --set checkpoint.resume="$work/grown" "${overrides[@]}"
grep -q "resuming from $work/grown/step-00000002" "$work/big.txt" || fail "did not resume"
python3 - "$work/small/telemetry/rank-00000.jsonl" "$work/big/telemetry/rank-00000.jsonl" <<'PY' ||
import json, sys
def loss(path):
    steps = [json.loads(l) for l in open(path) if '"kind":"step"' in l]
    return [s["loss"] for s in steps if s["step"] == 3][-1]
a, b = loss(sys.argv[1]), loss(sys.argv[2])
assert abs(a - b) <= 1e-5 * abs(a), (a, b)
PY
  fail "the grown model's loss at step 3 differs from the small model's"

# --restart-schedule: written as step 0, so the run restarts its schedule at step 1, on the
# same next batch (the loader position is kept): the same loss again.
"$BIN/ms-ckpt" grow "$small" --to d_model=32,n_layers=3,d_ff=48 --restart-schedule \
  --output "$work/restart" > /dev/null 2>&1 || fail "grow --restart-schedule exited $?"
[ "$(cat "$work/restart/latest")" = step-00000000 ] || fail "--restart-schedule is not step 0"
train "$work/big0" 1 --set checkpoint.resume="$work/restart" "${overrides[@]}"
python3 - "$work/small/telemetry/rank-00000.jsonl" "$work/big0/telemetry/rank-00000.jsonl" <<'PY' ||
import json, sys
def loss(path, step):
    steps = [json.loads(l) for l in open(path) if '"kind":"step"' in l]
    return [s["loss"] for s in steps if s["step"] == step][-1]
a, b = loss(sys.argv[1], 3), loss(sys.argv[2], 1)
assert abs(a - b) <= 1e-5 * abs(a), (a, b)
PY
  fail "after --restart-schedule the first loss differs from the small model's next one"

# Neuron 0 of layer 0 and its copy 32 (d_ff 32 -> 48): equal gate weights on the 16 original
# inputs after grow (the 16 new inputs get fresh values), different ones after a step.
python3 - "$work/grown/step-00000002" "$work/big/checkpoints/step-00000003" <<'PY' ||
import json, struct, sys
def rows(step_dir, name, r0, r1):
    m = json.load(open(step_dir + "/manifest.json"))
    t = next(t for t in m["tensors"] if t["name"] == name)
    (s,) = t["shards"]
    assert s["codec"] == "raw" and s["lengths"] == t["global_shape"], s
    cols = t["global_shape"][1]
    with open(step_dir + "/" + s["file"], "rb") as f:
        f.seek(s["offset"])
        data = f.read(s["length"])
    v = struct.unpack("<%df" % (len(data) // 4), data)
    return v[r0 * cols:r0 * cols + 16], v[r1 * cols:r1 * cols + 16]
name = "model.layers.0.mlp.gate_proj.weight"
a, b = rows(sys.argv[1], name, 0, 32)
assert a == b, "the copies differ right after grow"
a, b = rows(sys.argv[2], name, 0, 32)
assert a != b, "the copies are still equal after a training step"
PY
  fail "duplicated neurons"

# MoE, untied, with a routing bias (no optimizer state) and a shared expert: grown in width,
# depth, expert width and shared-expert width, ms-train resumes and its next loss is the small
# model's; greedy tokens equal.
MOE=(--set model.tie_embeddings=false --set model.moe.num_experts=4 --set model.moe.top_k=2
     --set model.moe.expert_bias=true --set model.moe.shared_expert_d_ff=8 --set model.d_ff=16)
train "$work/moe" 2 "${MOE[@]}"
"$BIN/ms-ckpt" grow "$work/moe/checkpoints" --to d_model=32,n_layers=3,d_ff=24,shared_expert_d_ff=12 \
  --output "$work/moe-grown" > "$work/moe-grow.txt" 2>&1 || { cat "$work/moe-grow.txt"; fail "MoE grow"; }
read -r -a moe_overrides <<< "$(sed -n 's/^resume training with: //p' "$work/moe-grow.txt")"
for which in moe moe-grown; do
  dir="$work/$which"
  [ "$which" = moe ] && dir="$work/moe/checkpoints"
  "$BIN/ms-infer" generate --checkpoint "$dir" --prompts "$work/prompts.jsonl" \
    -o "$work/$which.jsonl" --no-progress 2> /dev/null || fail "ms-infer on $which exited $?"
done
[ "$(grep -c '"tokens": *\[[0-9]' "$work/moe.jsonl")" -eq 2 ] || fail "MoE completions are missing"
cmp -s <(python3 -c 'import json,sys; [print(json.loads(l)["tokens"]) for l in open(sys.argv[1])]' "$work/moe.jsonl") \
       <(python3 -c 'import json,sys; [print(json.loads(l)["tokens"]) for l in open(sys.argv[1])]' "$work/moe-grown.jsonl") ||
  fail "MoE greedy tokens differ after grow"
train "$work/moe" 3 "${MOE[@]}"
train "$work/moe-big" 3 "${MOE[@]}" --set checkpoint.resume="$work/moe-grown" "${moe_overrides[@]}"
python3 - "$work/moe/telemetry/rank-00000.jsonl" "$work/moe-big/telemetry/rank-00000.jsonl" <<'PY' ||
import json, sys
def loss(path):
    steps = [json.loads(l) for l in open(path) if '"kind":"step"' in l]
    return [s["loss"] for s in steps if s["step"] == 3][-1]
a, b = loss(sys.argv[1]), loss(sys.argv[2])
assert abs(a - b) <= 1e-5 * abs(a), (a, b)
PY
  fail "the grown MoE model's loss at step 3 differs from the small model's"

# Refusals: exit 1, the rule named, nothing written.
refuse() {  # refuse <expected text> <ms-ckpt grow args...>
  local want=$1
  shift
  if "$BIN/ms-ckpt" grow "$small" "$@" > "$work/refused.txt" 2>&1; then
    fail "grow $* succeeded"
  fi
  grep -q -- "$want" "$work/refused.txt" || { cat "$work/refused.txt"; fail "grow $*: no '$want'"; }
}
refuse "not a multiple of the head size 8" --to d_model=20 --output "$work/r1"
refuse "not a multiple of the query group size 2" --to d_model=24 --output "$work/r2"
refuse "does not divide n_heads=3" --to d_model=24,n_kv_heads=2 --output "$work/r3"
refuse "grow never shrinks" --to d_ff=16 --output "$work/r4"
refuse "needs 2" --to n_layers=4 --insert 0 --output "$work/r5"
refuse "--output" --to d_ff=40 --output "$small/inside"
refuse "already exists\|not empty\|--replace" --to d_ff=40 --output "$work/grown"
for r in r1 r2 r3 r4 r5; do [ ! -e "$work/$r" ] || fail "refused grow left $work/$r"; done
[ ! -e "$small/inside" ] || fail "refused grow wrote inside the source"
"$BIN/ms-ckpt" grow "$small" --to d_ff=40 --output "$work/grown" --replace > /dev/null 2>&1 ||
  fail "grow --replace exited $?"
echo PASS
