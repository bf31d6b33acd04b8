#!/usr/bin/env bash
# A/B of two builds of the toolkit, alternating A and B run by run so that a shared machine's
# drift hits both alike: the check that a restructuring (issue 41, "one model on any device")
# left the hot paths no slower. Per run and side:
#   train   ms-train tokens/s on one rank (train_bench.sh's shape: d_model 512, 8 layers,
#           sequence 256, batch 4, GPT-2 vocabulary), mean of the steps after the first two;
#   tp2     the same shape with tp = 2 on two ranks (1 BLAS thread each), mean after the first;
#   f32     ms-infer bench batch-1 decode steps/s (prompt 64, 64 new tokens) on a random 290M
#           model in f32;
#   int4    the same on that model quantized to int4 (group 64) by B's ms-infer.
# Prints every run, then per measure each side's median and B / A of the medians.
# Usage: scripts/bench/refactor_ab.sh A_BUILD B_BUILD [runs] [work dir]
#   A_BUILD, B_BUILD: build dirs with bin/ms-data, bin/ms-train, bin/ms-infer; B_BUILD also
#   bin/ms_infer_make_tiny_model (a build with -DMS_BUILD_TESTS=ON) to write the model.
set -euo pipefail
A=${1:?usage: refactor_ab.sh A_BUILD B_BUILD [runs] [work dir]}
B=${2:?usage: refactor_ab.sh A_BUILD B_BUILD [runs] [work dir]}
RUNS=${3:-3}
WORK=${4:-/tmp/ms-refactor-ab}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$WORK"
# shellcheck source=scripts/bench/bench_model.sh
source "$SRC/scripts/bench/bench_model.sh"

if [ ! -f "$WORK/s256.plan" ]; then
  "$B/bin/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$WORK/shakespeare" --no-progress > /dev/null
  printf 'seq_len: 256\ntotal_samples: 512\nsources:\n  - {name: s, prefix: %s, weight: 1}\n' \
    "$WORK/shakespeare" > "$WORK/mix.yaml"
  "$B/bin/ms-data" plan --config "$WORK/mix.yaml" --output "$WORK/s256.plan" > /dev/null
fi
if [ ! -f "$WORK/f32/config.json" ]; then
  write_bench_model 290m "$B/bin" "$WORK/f32" > /dev/null
fi
if [ ! -d "$WORK/int4" ]; then
  "$B/bin/ms-infer" quantize --model "$WORK/f32" --weights int4 --group-size 64 \
    -o "$WORK/int4" > /dev/null
fi

shape=(--config "$SRC/configs/tiny-dense.yaml" --set data.plan="$WORK/s256.plan"
       --set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8
       --set model.n_kv_heads=4 --set model.d_ff=1376 --set model.max_seq_len=256
       --set train.seq_len=256 --set train.global_batch=4 --set train.eval_every=0
       --set train.log_every=1 --set telemetry.trace=false)

# mean tokens/s of a training log's step lines after the first `skip`
mean_tokens() {
  grep -E 'step [0-9]+/' "$1" | tail -n +"$(($2 + 1))" |
    sed -E 's/.*tok\/s ([0-9.]+).*/\1/' | awk '{t += $1; n++} END {printf "%.1f", t / n}'
}

train_one() {  # train_one <build> <log>
  rm -rf "$WORK/run"
  OPENBLAS_NUM_THREADS=2 "$1/bin/ms-train" "${shape[@]}" --set run.dir="$WORK/run" \
    --set parallel.dp=1 --set train.micro_batch=4 --set train.steps=6 2> "$2" ||
    { cat "$2" >&2; return 1; }
  mean_tokens "$2" 2
}

train_tp2() {  # train_tp2 <build> <log>
  rm -rf "$WORK/run"
  mpirun -np 2 --oversubscribe -x OPENBLAS_NUM_THREADS=1 "$1/bin/ms-train" "${shape[@]}" \
    --set run.dir="$WORK/run" --set parallel.dp=1 --set parallel.tp=2 \
    --set train.micro_batch=2 --set train.steps=5 2> "$2" > /dev/null ||
    { cat "$2" >&2; return 1; }
  mean_tokens "$2" 1
}

decode() {  # decode <build> <model dir>: batch-1 decode steps/s
  OPENBLAS_NUM_THREADS=2 MS_NUM_THREADS=2 "$1/bin/ms-infer" bench --model "$2" \
    --num-prompts 1 --input-len 64 --output-len 64 --batch-sizes 1 --kv-blocks 64 \
    --stream-mib 256 2> /dev/null | grep -E '^\| +64 ' | awk -F'|' '{print $10 + 0}'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A: $A ($("$A/bin/ms-train" --version 2>&1 | head -1))"
echo "# B: $B ($("$B/bin/ms-train" --version 2>&1 | head -1))"
echo "| run | side | train tok/s | tp2 tok/s | f32 decode steps/s | int4 decode steps/s |"
echo "|---:|---|---:|---:|---:|---:|"
declare -A all
for i in $(seq 1 "$RUNS"); do
  for side in A B; do
    build=$A
    [ "$side" = B ] && build=$B
    t=$(train_one "$build" "$WORK/train.$side.log")
    p=$(train_tp2 "$build" "$WORK/tp2.$side.log")
    f=$(decode "$build" "$WORK/f32")
    q=$(decode "$build" "$WORK/int4")
    all[$side.train]+="$t "
    all[$side.tp2]+="$p "
    all[$side.f32]+="$f "
    all[$side.int4]+="$q "
    echo "| $i | $side | $t | $p | $f | $q |"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo
echo "| measure | A median | B median | B / A |"
echo "|---|---:|---:|---:|"
for m in train tp2 f32 int4; do
  a=$(echo "${all[A.$m]}" | median)
  b=$(echo "${all[B.$m]}" | median)
  echo "| $m | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}') |"
done
