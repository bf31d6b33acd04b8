#!/usr/bin/env bash
# Training on the GPU against the CPU (issue 42's parity checks), for a short lease: builds a
# Shakespeare plan with the bundled ms-data, then for a dense and a MoE model trains N steps
# with train.device: cpu and twice with the GPU device, and checks that
#   - every step's loss on the GPU is within 1e-5 relative of the CPU's (f32, TF32 off), and
#   - the two GPU runs are bitwise identical (deterministic kernels);
# then trains each model M steps on the GPU in f32 and twice in bf16 (train.precision) and
# checks that every bf16 step's loss is within 2e-2 relative of the f32 one's and that the two
# bf16 runs are bitwise identical.
# Seed and shapes differ from the unit tests' (GPU_TRAIN_SEED, GPU_TRAIN_DMODEL to vary them).
#
# Usage: gpu_train_check.sh DIR OUT_DIR
#   DIR: a gpu_bundle.sh folder (ms-train, ms-data, the corpus and tokenizer, lib/, ompi/).
#   OUT_DIR: receives data/, runs/<model>-<device>[-again]/ and train_parity.md.
# Environment: GPU_TRAIN_DEVICE (default cuda:0; `cpu` tries the script's plumbing on a machine
# without a GPU), GPU_TRAIN_STEPS (5), GPU_TRAIN_BF16_STEPS (20), GPU_TRAIN_SEED (1234),
# GPU_TRAIN_DMODEL (96).
set -uo pipefail
dir=$(cd "${1:?usage: gpu_train_check.sh DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu_train_check.sh DIR OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
device=${GPU_TRAIN_DEVICE:-cuda:0}
steps=${GPU_TRAIN_STEPS:-5}
bf16_steps=${GPU_TRAIN_BF16_STEPS:-20}
seed=${GPU_TRAIN_SEED:-1234}
dmodel=${GPU_TRAIN_DMODEL:-96}
# shellcheck source=scripts/bench/gpu_env.sh
source "$dir/gpu_env.sh" "$dir"

echo "== data"
if [[ ! -e $out/data/s128.plan ]]; then
  mkdir -p "$out/data"
  "$dir/ms-data" build -i "$dir/train_data/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$dir/train_data/tokenizer.json" -o "$out/data/shakespeare" --no-progress > /dev/null ||
    { echo "ms-data build failed"; exit 1; }
  cat > "$out/data/mix.yaml" <<YAML
seq_len: 128
total_samples: 4096
validation: {fraction: 0.02, samples: 64}
sources:
  - {name: shakespeare, prefix: $out/data/shakespeare, weight: 1.0}
YAML
  "$dir/ms-data" plan --config "$out/data/mix.yaml" --output "$out/data/s128.plan" > /dev/null ||
    { echo "ms-data plan failed"; exit 1; }
fi

# train <config> <device> <run name> [--set ...]: N steps of the shipped config, shrunk, on one
# rank; later --set values win.
train() {
  local config=$1 dev=$2 name=$3
  shift 3
  rm -rf "${out:?}/runs/$name"
  mkdir -p "$out/runs"
  "$dir/ms-train" --config "$dir/train_configs/$config" --set data.plan="$out/data/s128.plan" \
    --set run.dir="$out/runs/$name" --set run.seed="$seed" --set train.device="$dev" \
    --set train.steps="$steps" --set train.global_batch=8 --set train.micro_batch=4 \
    --set train.seq_len=128 --set model.max_seq_len=128 --set model.d_model="$dmodel" \
    --set model.n_heads=6 --set model.n_kv_heads=2 --set model.d_ff=256 \
    --set model.n_layers=3 --set train.eval_every=0 --set checkpoint.every=0 \
    --set train.log_every=1 --set train.mfu_peak_gflops=1 "$@" > "$out/runs/$name.log" 2>&1
}
losses() { grep -o '"loss":[^,}]*' "$out/runs/$1/telemetry/rank-00000.jsonl" | cut -d: -f2; }
# compare <model> <steps> <tolerance> <reference run> <run> <run again>: a table row per step
# (appended to train_parity.md); fails when a step of <run> is further than <tolerance>
# relative from the reference, differs from <run again>, or a run has the wrong step count.
compare() {
  local model=$1 steps=$2 tolerance=$3
  paste <(losses "$4") <(losses "$5") <(losses "$6") |
    awk -v model="$model" -v steps="$steps" -v tol="$tolerance" '
      { d = $1 - $2; if (d < 0) d = -d; rel = d / ($1 < 0 ? -$1 : $1);
        same = ($2 == $3) ? "bitwise" : "DIFFERS";
        printf "| %s | %d | %s | %s | %.2e | %s |\n", model, NR, $1, $2, rel, same;
        if (rel > tol || same != "bitwise") bad = 1 }
      END { if (NR != steps) { printf "| %s | only %d of %d steps |\n", model, NR, steps; bad = 1 }
            exit bad }' >> "$out/train_parity.md"
}

status=0
{
  echo "# Training parity: $device against cpu, $steps steps, seed $seed, d_model $dmodel"
  echo
  echo "| model | step | cpu loss | $device loss | relative difference | $device again |"
  echo "|---|---|---|---|---|---|"
} > "$out/train_parity.md"
for model in tiny-dense tiny-moe; do
  echo "== $model"
  ok=1
  train "$model.yaml" cpu "$model-cpu" || { echo "cpu run failed"; tail "$out/runs/$model-cpu.log"; ok=0; }
  train "$model.yaml" "$device" "$model-dev" || { echo "$device run failed"; tail "$out/runs/$model-dev.log"; ok=0; }
  train "$model.yaml" "$device" "$model-dev-again" || { echo "$device rerun failed"; ok=0; }
  if [[ $ok -eq 1 ]]; then
    compare "$model" "$steps" 1e-5 "$model-cpu" "$model-dev" "$model-dev-again" || ok=0
  fi
  [[ $ok -eq 1 ]] || { echo "$model: parity FAILED"; status=1; }
done
{
  echo
  echo "# bf16 against f32 on $device, $bf16_steps steps"
  echo
  echo "| model | step | f32 loss | bf16 loss | relative difference | bf16 again |"
  echo "|---|---|---|---|---|---|"
} >> "$out/train_parity.md"
for model in tiny-dense tiny-moe; do
  echo "== $model bf16"
  ok=1
  long=(--set train.steps="$bf16_steps")
  train "$model.yaml" "$device" "$model-f32-long" "${long[@]}" || { echo "f32 run failed"; ok=0; }
  for run in bf16 bf16-again; do
    train "$model.yaml" "$device" "$model-$run" "${long[@]}" --set train.precision=bf16 ||
      { echo "$model-$run failed"; tail "$out/runs/$model-$run.log"; ok=0; }
  done
  if [[ $ok -eq 1 ]]; then
    compare "$model" "$bf16_steps" 2e-2 "$model-f32-long" "$model-bf16" "$model-bf16-again" || ok=0
  fi
  [[ $ok -eq 1 ]] || { echo "$model: bf16 check FAILED"; status=1; }
done
cat "$out/train_parity.md"
exit $status
