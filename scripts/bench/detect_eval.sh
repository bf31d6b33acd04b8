#!/usr/bin/env bash
# Benchmark of ms-diagnose detect (docs/bench/diagnose-detect.md):
#   1. the >= 100-job evaluation with the default moving-average denoiser (8 machines x 30 min);
#   2. LSTM-VAE denoiser training for cpu_util on healthy simulated jobs (train-denoiser);
#   3. the same evaluation with that denoiser for cpu_util.
# Prints wall times and the score tables (Minder's published precision 0.904 / recall 0.883
# beside them). Usage: detect_eval.sh [bin dir] [jobs] [work dir]
set -euo pipefail
BIN="${1:-build/bin}/ms-diagnose"
JOBS="${2:-120}"
WORK="${3:-$(mktemp -d)}"
MIN_SEVERITY="${MIN_SEVERITY:-0.1}"  # faulty jobs' severity drawn from [MIN_SEVERITY, 1]
mkdir -p "$WORK"

timed() { local t0=$(date +%s.%N); "$@"; local t1=$(date +%s.%N);
          echo "# wall time: $(echo "$t1 - $t0" | bc) s for: $*"; }

echo "## 1. eval, moving-average denoiser"
timed "$BIN" eval --jobs "$JOBS" --seed 1 --min-severity "$MIN_SEVERITY" --out "$WORK/eval-moving-average.json"

echo "## 2. train-denoiser cpu_util on 4 healthy jobs"
dirs=()
for seed in 101 102 103 104; do
  "$BIN" simulate --out "$WORK/healthy-$seed" --machines 8 --duration-s 1800 --seed $seed >/dev/null
  dirs+=("$WORK/healthy-$seed")
done
timed "$BIN" train-denoiser "${dirs[@]}" --metric cpu_util --window 60 --stride 30 --epochs 8 \
  -o "$WORK/denoiser-cpu_util.bin" | tail -3

echo "## 3. eval, LSTM-VAE denoiser for cpu_util"
timed "$BIN" eval --jobs "$JOBS" --seed 1 --min-severity "$MIN_SEVERITY" --denoiser "$WORK/denoiser-cpu_util.bin" \
  --out "$WORK/eval-lstm-vae.json"
echo "# reports in $WORK"
