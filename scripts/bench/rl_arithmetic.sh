#!/usr/bin/env bash
# RL post-training on the arithmetic task (docs/rl.md): a small model is first trained by
# ms-train on the bundled arithmetic stories alone (BPE 1024 learned from Tiny Shakespeare, as
# the demo; configs/tiny-cpu.yaml's 0.9 M-parameter shape, sequences of 128 tokens), then
# post-trained from that checkpoint by `ms-train rl` with GRPO and, separately, with DAPO, on the
# training prompts. Prints the held-out greedy exact-match accuracy (prompts never seen in
# training, data/corpus/make_arithmetic_prompts.sh) before and after each run, and each run's
# per-step mean reward and accuracy of its samples.
# The demo's BPE splits numbers into digits, so an answer sentence (" Olga has 41 pears.") is
# about 13 tokens: rollouts get 20 (DAPO's overlong shaping then starts at 15).
# Usage: rl_arithmetic.sh <bin dir> [work dir, default a new /tmp dir] [pretrain steps, 600]
#                         [rl steps, 60] [held-out seed, 20261206] [rl lr, 1e-4]
set -euo pipefail
BIN=${1:?usage: rl_arithmetic.sh <bin dir> [work dir] [pretrain steps] [rl steps] [held-out seed] [rl lr]}
BIN=$(cd "$BIN" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${2:-$(mktemp -d /tmp/ms_rl_arith_XXXXXX)}
STEPS=${3:-600}
RL_STEPS=${4:-60}
HELDOUT_SEED=${5:-20261206}
RL_LR=${6:-1.0e-4}
mkdir -p "$WORK/data"
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

echo "# rl_arithmetic.sh: $(uname -n), $(nproc --all) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)," \
  "pretrain $STEPS steps, RL $RL_STEPS steps at lr $RL_LR, held-out seed $HELDOUT_SEED"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -f data/arithmetic.plan ]; then
  "$BIN/ms-data" tokenizer train --input "$SRC/data/corpus/tinyshakespeare.txt" --vocab-size 1024 \
    --output data/tokenizer.json > /dev/null
  "$BIN/ms-data" build --input "$SRC/data/corpus/arithmetic.jsonl.zst" \
    --tokenizer data/tokenizer.json --output data/arithmetic --no-progress > /dev/null
  cat > data/mix.yaml <<YAML
seq_len: 128
seed: 1234
total_samples: $((STEPS * 16))
validation: {fraction: 0.02, samples: 64}
sources:
  - {name: arithmetic, prefix: $WORK/data/arithmetic, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config data/mix.yaml --output data/arithmetic.plan > /dev/null
fi
bash "$SRC/data/corpus/make_arithmetic_prompts.sh" data/prompts 500 "$HELDOUT_SEED"

t0=$(date +%s)
if [ ! -f pretrain/checkpoints/latest ]; then
  mpirun -np 2 "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set run.dir=pretrain \
    --set data.plan=data/arithmetic.plan --set train.steps="$STEPS" --set train.eval_every=0 \
    --set checkpoint.every=0 > pretrain.log 2>&1 || { tail -20 pretrain.log; exit 1; }
fi
grep -E "step $STEPS/$STEPS " pretrain.log | tail -1 || true
echo "# pretrained in $(($(date +%s) - t0)) s"

rl() {  # rl <name> <algorithm section>
  cat > "$1.yaml" <<YAML
run: {dir: $1, seed: 1}
actor: {checkpoint: pretrain/checkpoints}
prompts: {train: data/prompts/arithmetic_prompts_train.jsonl,
          eval: data/prompts/arithmetic_prompts_heldout.jsonl, eval_every: 10}
rollout: {group_size: 8, prompts_per_step: 8, max_tokens: 20, temperature: 1.0, stop: ["."]}
algorithm: $2
train: {steps: $RL_STEPS, mini_batches: 2, epochs: 1}
optimizer: {lr: $RL_LR, grad_clip: 1.0}
reward: {builtin: exact_number}
YAML
  rm -rf "$1"
  local t=$(date +%s)
  "$BIN/ms-train" rl --config "$1.yaml" > "$1.log" 2>&1 || { tail -3 "$1.log"; return 1; }
  echo "## $1: $(($(date +%s) - t)) s"
  python3 - "$1" <<'PY'
import json, sys
run = sys.argv[1]
evals = [json.loads(l) for l in open(f"{run}/rl_eval.jsonl")]
steps = [json.loads(l) for l in open(f"{run}/rl_steps.jsonl")]
print("held-out accuracy by step: " +
      ", ".join(f"{e['step']}: {100 * e['heldout_accuracy']:.1f}%" for e in evals) +
      f" ({evals[0]['prompts']} prompts)")
print(f"before {100 * evals[0]['heldout_accuracy']:.1f}%, after {100 * evals[-1]['heldout_accuracy']:.1f}%")
tenth = max(1, len(steps) // 10)
for s in steps[::tenth]:
    print(f"  step {s['step']:3d}: sample reward {s['mean_reward']:.3f} accuracy {s['accuracy']:.3f} "
          f"length {s['response_length']:.1f} kept {s['kept_groups']} dropped {s['dropped_groups']} "
          f"clip {s['clip_fraction']:.3f} rollout {s['rollout_s']:.2f}s update {s['update_s']:.2f}s")
PY
}
# A run that stops (DAPO's dynamic sampling at its bound when correct answers are too rare) is
# reported and the script goes on.
rl grpo "{name: grpo}" || echo "## grpo stopped (its log's tail above)"
rl dapo "{name: dapo, max_rounds: 16}" || echo "## dapo stopped (its log's tail above)"
