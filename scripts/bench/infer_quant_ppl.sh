#!/usr/bin/env bash
# Held-out perplexity per weight format (docs/bench/infer.md, "Perplexity per format"): trains
# configs/tiny-cpu.yaml (d_ff 384, so int4 groups of 32, 64 and 128 divide every linear weight)
# on the first 90% of Tiny Shakespeare's lines, then evaluates the checkpoint on the last 10%
# with f32, bf16, int8 and int4 g128/g64/g32 weights, each written by `ms-infer quantize` and
# read back (the quantized directory is what is evaluated; int8 and int4 with int8 activations,
# as served by default, and again with f32 ones), and with mixed models chosen under
# memory budgets from calibration windows of the training text. Each row has the held-out
# perplexity and the mean KL of its next-token distributions from the f32 model's.
#   scripts/bench/infer_quant_ppl.sh [BIN_DIR] [WORK_DIR]
# Environment: STEPS (400), RANKS (2; 1 runs without mpirun), BUDGETS (the mixed models' weight
# budgets in bytes; default: uniform int4-g64's, and halfway between uniform int4-g128 and
# uniform int8), SAMPLES (held-out windows, 0: all).
set -euo pipefail

BIN=$(realpath "${1:-build/test/bin}")
WORK=${2:-/tmp/ms_quant_ppl}
STEPS=${STEPS:-400}
RANKS=${RANKS:-2}
SAMPLES=${SAMPLES:-0}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$WORK"
cd "$WORK"

echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ! -f train.plan ]]; then
  corpus="$SRC/data/corpus/tinyshakespeare.txt"
  lines=$(wc -l <"$corpus")
  cut_at=$((lines * 9 / 10))
  head -n "$cut_at" "$corpus" >train.txt
  tail -n +$((cut_at + 1)) "$corpus" >heldout.txt
  "$BIN/ms-data" tokenizer train --input train.txt --vocab-size 1024 --output tokenizer.json
  for part in train heldout; do
    "$BIN/ms-data" build -i $part.txt --doc-separator blank-line --no-append-eos \
      -t tokenizer.json -o $part
  done
  cat >mix.yaml <<EOF
seq_len: 128
seed: 1234
total_samples: $((STEPS * 16))
validation:
  fraction: 0.02
  samples: 64
sources:
  - {name: shakespeare, prefix: $WORK/train, weight: 1.0}
EOF
  "$BIN/ms-data" plan --config mix.yaml --output train.plan
fi

if [[ ! -f run/checkpoints/latest ]]; then
  launch=()
  [[ "$RANKS" -gt 1 ]] && launch=(mpirun --oversubscribe -np "$RANKS")
  start=$(date +%s)
  "${launch[@]}" "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set model.d_ff=384 \
    --set data.plan="$WORK/train.plan" --set run.dir="$WORK/run" --set train.steps="$STEPS" \
    --set checkpoint.every="$STEPS" --set checkpoint.resume=none 2>&1 | tee train.log |
    grep -E "step +($STEPS|[0-9]*00)\b|eval" || true
  echo "# trained $STEPS steps on $RANKS ranks in $(($(date +%s) - start)) s"
fi

ckpt=run/checkpoints/latest
eval_ppl() {  # label, then eval-ppl's model arguments
  local label=$1
  shift
  local line
  line=$("$BIN/ms-infer" eval-ppl "$@" --dataset heldout --samples "$SAMPLES" --json \
    --reference-checkpoint $ckpt)
  printf '%-22s %s\n' "$label" "$line"
}
quantized() {  # name, then quantize's format arguments
  local name=$1
  shift
  [[ -d q-$name ]] || "$BIN/ms-infer" quantize --checkpoint $ckpt -o q-$name "$@" >/dev/null
  echo q-$name
}

echo "# held-out perplexity ($(wc -w <heldout.txt) words of held-out text)"
eval_ppl f32 --checkpoint $ckpt
eval_ppl bf16 --model "$(quantized bf16 --weights bf16)"
eval_ppl int8 --model "$(quantized int8 --weights int8)"
for g in 128 64 32; do
  eval_ppl int4-g$g --model "$(quantized int4-g$g --weights int4 --group-size $g)"
done
# int8 and int4 are served with int8 activations by default (the rows above, through the
# serving kernels); with f32 activations they are evaluated as their dequantized weights.
eval_ppl "int8 x f32 act" --model q-int8 --activations f32
for g in 128 64 32; do
  eval_ppl "int4-g$g x f32 act" --model q-int4-g$g --activations f32
done
# The same figures with --weights on the checkpoint (quantized in memory) must equal the
# quantized directories' exactly.
eval_ppl int4-g64-in-memory --checkpoint $ckpt --weights int4 --group-size 64

# The weight bytes a directory holds: its model.safetensors without the header.
bytes_of() {
  python3 -c 'import struct,sys,os; f=sys.argv[1]; n=struct.unpack("<Q", open(f,"rb").read(8))[0]; print(os.path.getsize(f) - 8 - n)' \
    "$1/model.safetensors"
}
# Two budgets: the bytes of uniform int4-g64 (the same memory, formats spent where they matter)
# and halfway between uniform int4-g128 and uniform int8.
BUDGETS=${BUDGETS:-"$(bytes_of q-int4-g64) $((($(bytes_of q-int8) + $(bytes_of q-int4-g128)) / 2))"}
for budget in $BUDGETS; do
  echo "# mixed model under --memory-budget $budget (calibration: 16 windows of the training text)"
  rm -rf q-mixed q-mixed-$budget
  "$BIN/ms-infer" quantize --checkpoint $ckpt -o q-mixed-$budget --memory-budget "$budget" \
    --calibration train --calibration-samples 16 2>&1 | grep -v "weights measured" |
    tee mixed-$budget.txt
  eval_ppl "mixed ($budget B)" --model q-mixed-$budget
done
for q in q-*; do printf '%-18s %10d weight bytes\n' "$q" "$(bytes_of "$q")"; done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
