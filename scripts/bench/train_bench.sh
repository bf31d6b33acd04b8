#!/usr/bin/env bash
# ms-train throughput on one rank for a matmul-bound model (d_model 512, 8 layers, sequence
# 256, GPT-2 vocabulary), as tokens/s and MFU against the sgemm rate ms-train measures at start,
# and the same model shape in PyTorch on the CPU with the same thread count when Debian's
# python3-torch is present. Results go to docs/bench/train.md.
# Usage: scripts/bench/train_bench.sh [build dir] [threads] [steps]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
THREADS=${2:-2}
STEPS=${3:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$BUILD/bin/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
  -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$work/shakespeare" --no-progress > /dev/null
printf 'seq_len: 256\ntotal_samples: 512\nsources:\n  - {name: s, prefix: %s, weight: 1}\n' \
  "$work/shakespeare" > "$work/mix.yaml"
"$BUILD/bin/ms-data" plan --config "$work/mix.yaml" --output "$work/s256.plan" > /dev/null

OPENBLAS_NUM_THREADS=$THREADS "$BUILD/bin/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
  --set data.plan="$work/s256.plan" --set run.dir="$work/run" --set parallel.dp=1 \
  --set model.d_model=512 \
  --set model.n_layers=8 --set model.n_heads=8 --set model.n_kv_heads=4 --set model.d_ff=1376 \
  --set model.max_seq_len=256 --set train.seq_len=256 --set train.global_batch=4 \
  --set train.micro_batch=4 --set train.steps="$STEPS" --set train.log_every=1 \
  --set train.eval_every=0 --set telemetry.trace=false 2> "$work/log.txt" ||
  { cat "$work/log.txt"; exit 1; }
# Steps after the first two (warm-up): mean tokens/s and MFU.
read -r ours mfu < <(grep -E 'step [0-9]+/' "$work/log.txt" | tail -n +3 |
  sed -E 's/.*tok\/s ([0-9.]+) \| mfu ([0-9.]+)%.*/\1 \2/' |
  awk '{t += $1; m += $2; n++} END {printf "%.1f %.1f\n", t / n, m / n}')
sgemm=$(grep -oE 'sgemm rate of rank 0: [0-9.]+' "$work/log.txt" | grep -oE '[0-9.]+$')
echo "# ms-train: d_model 512, 8 layers, seq 256, batch 4, vocab 50257, $THREADS threads"
echo "ms-train tokens/s $ours  MFU $mfu%  (sgemm $sgemm GFLOP/s)"
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  theirs=$(/usr/bin/python3 "$SRC/scripts/bench/train_bench_torch.py" --threads "$THREADS" \
    --steps "$STEPS" | awk '{print $2}')
  echo "pytorch  tokens/s $theirs"
  awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "ratio ms-train / pytorch: %.2f\n", a / b}'
else
  echo "pytorch: python3-torch not installed; no comparison"
fi
