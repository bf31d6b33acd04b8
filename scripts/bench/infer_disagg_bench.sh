#!/usr/bin/env bash
# Disaggregated against colocated MoE serving on 4 ranks, in one run: a random MoE model whose
# experts hold most of the weights (ms_infer_make_tiny_model), served by `ms-infer bench` under
# mpirun as 4 colocated replicas and as attention + expert ranks with 1 and 2 micro-batches
# (ping-pong off and on); the same on 2 ranks (one per core here); then `ms-infer plan` for 4
# ranks from measured costs. Each disaggregated run prints every rank's pipeline idle fraction
# and the token traffic.
# Usage: scripts/bench/infer_disagg_bench.sh <build dir> [mpirun extra args...]
# (results go in docs/bench/infer-disaggregated.md)
set -euo pipefail
BUILD=${1:-build}
shift || true
SRC=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OPENBLAS_NUM_THREADS=1
mpi=(mpirun --oversubscribe "$@")
"$BUILD/bin/ms_infer_make_tiny_model" --dir "$work/moe" \
  --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" --d-model 256 --layers 4 --heads 8 \
  --kv-heads 4 --d-ff 1024 --max-seq-len 256 --experts 8 --top-k 2
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
bench=(bench --model "$work/moe" --input-len 32 --output-len 32 --max-batch 16)
echo "== colocated: 4 replicas, batch 16 each"
"${mpi[@]}" -np 4 "$BUILD/bin/ms-infer" "${bench[@]}" --num-prompts 64
for split in "2 1" "2 2" "1 2" "3 2"; do
  read -r attention micro <<< "$split"
  echo "== disaggregated: $attention attention + $((4 - attention)) expert ranks, $micro micro-batches"
  "${mpi[@]}" -np 4 "$BUILD/bin/ms-infer" "${bench[@]}" --num-prompts 64 \
    --attention-ranks "$attention" --micro-batches "$micro"
done
echo "== 2 ranks, one per core (no oversubscription): colocated, then 1 attention + 1 expert rank"
"${mpi[@]}" -np 2 "$BUILD/bin/ms-infer" "${bench[@]}" --num-prompts 32
for micro in 1 2; do
  echo "== 1 attention + 1 expert rank, $micro micro-batches"
  "${mpi[@]}" -np 2 "$BUILD/bin/ms-infer" "${bench[@]}" --num-prompts 32 --attention-ranks 1 \
    --micro-batches "$micro"
done
echo "== plan for 4 ranks"
"${mpi[@]}" -np 2 "$BUILD/bin/ms-infer" plan --model "$work/moe" --ranks 4 --tpot-ms 200 \
  --context 48 --micro-batch-sizes 1,2,4,8,16 --top 5
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
