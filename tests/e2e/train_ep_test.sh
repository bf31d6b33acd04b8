#!/usr/bin/env bash
# Expert parallelism in ms-train, specified by equivalence with the single-process run (issue
# 14): a 4-layer MoE model (4 experts, top-2, a shared expert) trained 5 steps at ep = 2 and 4,
# with the all-to-alls in 1 (the default), 2 and 4 overlapped chunks, whole (not tp-split)
# experts under tp 2 with and without ep, ep = 2 x dp 4, ep = 2 x tp = 2, ep = 2 x pp = 2, top-1, without the shared expert, with
# ZeRO-1 off, with the router z-loss, with auxiliary-loss-free balancing, logs losses and gradient norms within 1e-5 relative of the one-rank run at every
# step, and the same validation loss; the same layout twice is bitwise identical; a capacity
# factor drops the same tokens at ep = 1 and ep = 2; a run saved at one expert layout resumes
# at another within 1e-5; ep that does not divide dp or the experts is refused; a rank failing
# mid-run ends every rank with its message.
# Usage: train_ep_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/layouts.sh"

shakespeare_plan 32 256 16

# An MoE model of 4 layers, 4 experts; 4 micro-batches of 2 per step over the dp ranks.
base=(--set data.plan="$work/s32.plan" --set model.d_model=32 --set model.n_layers=4
      --set model.n_heads=8 --set model.n_kv_heads=4 --set model.d_ff=64
      --set model.max_seq_len=32 --set train.seq_len=32 --set train.steps=5
      --set train.global_batch=8 --set train.micro_batch=2 --set train.eval_every=5
      --set train.eval_batches=1 --set train.log_every=1 --set train.mfu_peak_gflops=1
      --set optim.warmup_steps=1 --set parallel.dp=4 --set model.moe.num_experts=4
      --set model.moe.top_k=2 --set model.moe.shared_expert_d_ff=32)

passed=0
train 1 "$work/ref"
train 1 "$work/ref-top1" --set model.moe.top_k=1
train 1 "$work/ref-noshared" --set model.moe.shared_expert_d_ff=0
for layout in "2 ep2 --set parallel.ep=2" \
              "4 ep4 --set parallel.ep=4" \
              "4 ep2dp4 --set parallel.ep=2" \
              "4 ep2z0 --set parallel.ep=2 --set parallel.zero=0" \
              "4 ep2tp2 --set parallel.ep=2 --set parallel.tp=2" \
              "4 ep2pp2 --set parallel.ep=2 --set parallel.pp=2" \
              "4 ep2full --set parallel.ep=2 --set parallel.recompute=full" \
              "2 tp2whole --set parallel.tp=2 --set parallel.expert_tp=false" \
              "4 ep2tp2whole --set parallel.ep=2 --set parallel.tp=2 --set parallel.expert_tp=false" \
              "2 ep2c2 --set parallel.ep=2 --set parallel.ep_overlap_chunks=2" \
              "4 ep4c4 --set parallel.ep=4 --set parallel.ep_overlap_chunks=4"; do
  read -r np name args <<<"$layout"
  # shellcheck disable=SC2086
  train "$np" "$work/$name" $args
  close "$work/$name" "$work/ref" 1
  passed=$((passed + 1))
done
train 2 "$work/top1-ep2" --set parallel.ep=2 --set model.moe.top_k=1
close "$work/top1-ep2" "$work/ref-top1" 1
train 4 "$work/noshared-ep4" --set parallel.ep=4 --set model.moe.shared_expert_d_ff=0
close "$work/noshared-ep4" "$work/ref-noshared" 1
train 1 "$work/ref-z" --set model.moe.z_loss_coef=0.01
train 2 "$work/z-ep2" --set parallel.ep=2 --set model.moe.z_loss_coef=0.01
close "$work/z-ep2" "$work/ref-z" 1
grep -q "| z_loss " "$work/z-ep2.log" || fail "no z_loss in the step log"
passed=$((passed + 3))
model_line() { grep -o 'model: .* parameters ([0-9.]*M active)' "$1"; }
[ "$(model_line "$work/ep4.log")" = "$(model_line "$work/ref.log")" ] ||
  fail "ep 4 reports another model size: $(model_line "$work/ep4.log")"
summary='expert-parallel all-to-all: [0-9]+ all-to-alls, [0-9.]+ MiB sent to other ranks per step; up to [0-9]+% hidden behind compute'
grep -qE "$summary .*parallel.ep_overlap_chunks 2" "$work/ep2c2.log" || fail "no all-to-all summary"
# Without chunks (the default) nothing can hide: every all-to-all is waited for at once.
grep -qE "up to 0% hidden .*parallel.ep_overlap_chunks 1;" "$work/ep2.log" ||
  fail "ep_overlap_chunks 1 claims overlap: $(grep all-to-all "$work/ep2.log")"

# The same layout twice: bitwise the same losses and gradient norms.
train 4 "$work/ep2tp2-again" --set parallel.ep=2 --set parallel.tp=2
bitwise "$work/ep2tp2" "$work/ep2tp2-again" "ep 2 x tp 2 twice differs"
passed=$((passed + 1))

# A capacity factor: the same assignments dropped at ep = 1 and ep = 2 (dp 2 both), every step,
# and the same losses within 1e-5.
cf=(--set model.moe.capacity_factor=1.0)
train 2 "$work/cf-ep1" "${cf[@]}"
train 2 "$work/cf-ep2" "${cf[@]}" --set parallel.ep=2
dropped() { grep -o 'step [0-9]*/5 .*| dropped [0-9]*' "$1.log" | sed 's/step \([0-9]*\).*dropped/\1/'; }
[ "$(dropped "$work/cf-ep1" | wc -l)" -eq 5 ] || fail "no dropped counts in the log"
[ "$(dropped "$work/cf-ep1" | awk '{ s += $2 } END { print s }')" -gt 0 ] || fail "nothing dropped"
diff <(dropped "$work/cf-ep1") <(dropped "$work/cf-ep2") || fail "ep = 2 drops other tokens"
close "$work/cf-ep2" "$work/cf-ep1" 1
passed=$((passed + 1))

# Auxiliary-loss-free balancing: ep = 2 trains like ep = 1 with the routing bias on; the bias a
# checkpoint holds is exactly the sum of rate * sign(mean - load) over the steps' loads the
# telemetry recorded (Megatron-LM's rule); it survives a resume at another expert layout.
bias=(--set model.moe.expert_bias=true --set model.moe.bias_update_rate=0.01
      --set checkpoint.every=2 --set checkpoint.async=false)
train 2 "$work/bias-ep1" "${bias[@]}"
train 2 "$work/bias-ep2" "${bias[@]}" --set parallel.ep=2
close "$work/bias-ep2" "$work/bias-ep1" 1
train 2 "$work/bias-resume" "${bias[@]}" \
  --set checkpoint.resume="$work/bias-ep2/checkpoints/step-00000002"
close "$work/bias-resume" "$work/bias-ep2" 3
for run in bias-ep2 bias-resume; do
  "$BIN/ms-ckpt" export "$work/$run/checkpoints/step-00000005" --format safetensors \
    -o "$work/$run-hf" > /dev/null || fail "export of $run"
done
python3 - "$work" <<'PY' || fail "the routing bias does not follow the recorded load"
import json, struct, sys
work = sys.argv[1]
def tensors(d):
    with open(f"{d}/model.safetensors", "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        head = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, t in head.items():
        if name.endswith("e_score_correction_bias"):
            a, b = t["data_offsets"]
            out[name] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out
got, resumed = tensors(f"{work}/bias-ep2-hf"), tensors(f"{work}/bias-resume-hf")
assert len(got) == 4, sorted(got)
want = {l: [0.0] * 4 for l in range(4)}
for line in open(f"{work}/bias-ep2/telemetry/rank-00000.jsonl"):
    r = json.loads(line)
    if r.get("kind") != "step":
        continue
    for l, counts in enumerate(r["expert_tokens"]):
        mean = sum(counts) / len(counts)
        for e, c in enumerate(counts):
            want[l][e] += 0.01 * ((mean > c) - (mean < c))
moved = 0
for l in range(4):
    name = f"model.layers.{l}.block_sparse_moe.gate.e_score_correction_bias"
    for e in range(4):
        assert abs(got[name][e] - want[l][e]) < 1e-6, (name, got[name], want[l])
        assert abs(resumed[name][e] - got[name][e]) < 1e-6, (name, resumed[name], got[name])
        moved += got[name][e] != 0
assert moved > 0, "the bias never moved"
PY
grep -q "model.layers.0.block_sparse_moe.gate.e_score_correction_bias" \
  <("$BIN/ms-ckpt" inspect "$work/bias-ep2/checkpoints/step-00000005" 2>&1) ||
  fail "inspect does not list the routing bias"
passed=$((passed + 3))

# Saved at one expert layout, resumed at another from step 2: steps 3..5 as the uninterrupted run.
train 2 "$work/save-ep2" --set parallel.ep=2 --set checkpoint.every=2 --set checkpoint.async=false
train 4 "$work/save-ep4" --set parallel.ep=4 --set checkpoint.every=2 --set checkpoint.async=false
for resume in "save-ep2 1 --set parallel.ep=1" \
              "save-ep2 4 --set parallel.ep=4" \
              "save-ep4 2 --set parallel.ep=2 --set parallel.zero=0" \
              "save-ep4 4 --set parallel.ep=2 --set parallel.tp=2" \
              "save-ep4 4 --set parallel.ep=2 --set parallel.tp=2 --set parallel.expert_tp=false"; do
  read -r from np args <<<"$resume"
  dir="$work/resume-$passed"
  # shellcheck disable=SC2086
  train "$np" "$dir" --set checkpoint.resume="$work/$from/checkpoints/step-00000002" $args
  grep -q "resuming from" "$dir.log" || fail "$dir did not resume"
  close "$dir" "$work/$from" 3
  passed=$((passed + 1))
done

# An ep checkpoint serves as a whole model: disaggregated (attention and experts on separate
# ranks) the same tokens as in one process, and it exports to Mixtral's expert names.
ckpt="$work/save-ep2/checkpoints/step-00000002"
cat > "$work/prompts.jsonl" <<'JSONL'
{"id": "a", "prompt": "ROMEO: what light", "max_tokens": 6}
JSONL
"$BIN/ms-infer" generate --checkpoint "$ckpt" --prompts "$work/prompts.jsonl" -o "$work/one.jsonl" \
  --no-progress > /dev/null 2>&1 || fail "generate from the ep checkpoint"
"$MPIRUN" --oversubscribe -np 4 "$BIN/ms-infer" generate --checkpoint "$ckpt" \
  --prompts "$work/prompts.jsonl" -o "$work/disagg.jsonl" --attention-ranks 2 --micro-batches 2 \
  --max-batch 2 --no-progress > /dev/null 2> "$work/disagg.err" ||
  fail "disaggregated generate from the ep checkpoint: $(cat "$work/disagg.err")"
tokens() { python3 -c 'import json,sys; print([json.loads(l)["tokens"] for l in open(sys.argv[1])])' "$1"; }
[ "$(tokens "$work/one.jsonl")" = "$(tokens "$work/disagg.jsonl")" ] ||
  fail "disaggregated serving of the ep checkpoint gives other tokens"
"$BIN/ms-ckpt" export "$ckpt" --format safetensors -o "$work/hf" > /dev/null ||
  fail "export of the ep checkpoint"
grep -q "model.layers.3.block_sparse_moe.experts.3.w2.weight" "$work/hf/"*.json 2>/dev/null ||
  python3 - "$work/hf" <<'PY' || fail "the export lacks Mixtral's expert names"
import json, os, struct, sys
d = sys.argv[1]
names = set()
for f in os.listdir(d):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            names |= set(json.loads(fh.read(n)))
assert "model.layers.3.block_sparse_moe.experts.3.w2.weight" in names, sorted(names)[:8]
PY
passed=$((passed + 1))

# Offline: the ep 2 checkpoint resharded for ep = 4 x dp = 4 holds the same values and resumes
# there; ms-diagnose moe-load summarizes the per-expert load the telemetry recorded.
"$BIN/ms-ckpt" reshard "$ckpt" --to ep=4,dp=4 --output "$work/rs-ep4" > "$work/rs.txt" 2>&1 ||
  { cat "$work/rs.txt"; fail "reshard to ep=4,dp=4"; }
"$BIN/ms-ckpt" diff "$ckpt" "$work/rs-ep4/step-00000002" > "$work/diff.txt" 2>&1 ||
  { cat "$work/diff.txt"; fail "the ep=4 reshard changed values"; }
train 4 "$work/resume-rs" --set checkpoint.resume="$work/rs-ep4/step-00000002" --set parallel.ep=4
close "$work/resume-rs" "$work/save-ep2" 3
out=$("$BIN/ms-diagnose" moe-load "$work/cf-ep2") || { echo "$out"; fail "moe-load"; }
grep -q "layer 3" <<<"$out" || { echo "$out"; fail "moe-load lacks layer 3"; }
grep -qi "dropped" <<<"$out" || { echo "$out"; fail "moe-load does not report the drops"; }
grep -q '"expert_tokens":\[\[' "$work/ep2/telemetry/rank-00001.jsonl" || fail "no expert counts in the telemetry"
passed=$((passed + 2))

# Refused before any step, naming the key and the rule.
refused 2 "parallel.ep (4) must divide the data-parallel size 2" --set parallel.ep=4
passed=$((passed + 1))
refused 2 "parallel.ep (2) needs MoE layers" \
  --set parallel.ep=2 --set model.moe.num_experts=0 --set model.moe.shared_expert_d_ff=0
passed=$((passed + 1))

# One rank failing mid-run (an exception in an ep 2 x dp 4 step) ends every rank with its
# message within seconds; nobody is left in an all-to-all.
fails_together 4 1 --set parallel.ep=2
passed=$((passed + 1))
echo "ms-train expert parallelism end to end: $passed passed, 0 failed"
