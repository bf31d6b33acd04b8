#!/usr/bin/env bash
# The heap policy of core/heap_policy.h against the C library's own, in one run: ms-train's step
# and the data-parallel gradient reduction's exposed wait (telemetry comm_wait_s) with freed
# memory kept mapped (the default) and with MS_KEEP_FREED_MEMORY=0, alternated ROUNDS times so
# that a machine whose speed drifts charges both alike. Layouts (the planner benchmark's two
# models, scripts/bench/plan_layouts_bench.sh, on Tiny Shakespeare with its 1024-token BPE):
#   dense dp1        8 layers of d_model 256, global batch 8: no reduction (the control);
#   dense dp2 zero1  the same over 2 ranks, ZeRO-1 (a reduce-scatter of 26 MiB per step);
#   held dp2 zero1   6 layers of d_model 384 (12 heads, 4 KV heads, d_ff 1024), global batch 16,
#                    micro-batch 4 (40 MiB per step);
#   held dp4 zero0   the same over 4 ranks (all-reduce), oversubscribed on a 2-core machine.
# Prints per layout and policy the median over rounds of each run's median step (steps 3..STEPS)
# and comm_wait_s, and the kept/unkept step ratio.
# Usage: train_heap_bench.sh <bin dir> [work dir, default a new /tmp dir] [steps, 8] [rounds, 3]
set -euo pipefail
BIN=${1:?usage: train_heap_bench.sh <bin dir> [work dir] [steps] [rounds]}
BIN=$(cd "$BIN" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/scripts/bench/plan_models.sh"
WORK=${2:-$(mktemp -d /tmp/ms_heap_XXXXXX)}
STEPS=${3:-8}
ROUNDS=${4:-3}
mkdir -p "$WORK"
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1

echo "# train_heap_bench.sh: $(uname -n), $(nproc --all) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%Y-%m-%dT%H:%MZ), $STEPS steps, $ROUNDS rounds"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
plan_bench_data "$BIN" "$WORK"

common=(--set data.plan="$WORK/s128.plan" --set train.steps="$STEPS" --set train.eval_every=0
        --set checkpoint.every=0 --set telemetry.trace=false --set train.log_every=1
        --set optim.warmup_steps=1 "${PLAN_DENSE_MODEL[@]}")
held=("${PLAN_HELDOUT_MODEL[@]}" --set train.micro_batch=4)
layouts=("dense-dp1" "dense-dp2-zero1" "held-dp2-zero1" "held-dp4-zero0")
args_of() {
  case $1 in
    dense-dp1) echo "1 --set parallel.dp=1" ;;
    dense-dp2-zero1) echo "2 --set parallel.dp=2 --set parallel.zero=1" ;;
    held-dp2-zero1) echo "2 ${held[*]} --set parallel.dp=2 --set parallel.zero=1" ;;
    held-dp4-zero0) echo "4 ${held[*]} --set parallel.dp=4 --set parallel.zero=0" ;;
  esac
}

: > results.txt
for round in $(seq "$ROUNDS"); do
  for layout in "${layouts[@]}"; do
    for keep in 1 0; do
      read -r np rest <<< "$(args_of "$layout")"
      dir=$WORK/$layout-keep$keep
      rm -rf "$dir"
      # shellcheck disable=SC2086  # rest holds several --set arguments
      MS_KEEP_FREED_MEMORY=$keep mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -x MS_KEEP_FREED_MEMORY \
        -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set run.dir="$dir" \
        "${common[@]}" $rest > "$dir.out" 2>&1 || { tail "$dir.out"; exit 1; }
      python3 - "$dir/telemetry/rank-00000.jsonl" "$layout" "$keep" >> results.txt <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if r.get("kind") == "step" and r.get("step", 0) >= 3]
print(sys.argv[2], sys.argv[3], statistics.median(r["step_s"] for r in rows),
      statistics.median(r["phases"]["comm_wait_s"] for r in rows))
PY
    done
  done
done
python3 - results.txt <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    layout, keep, step, wait = line.split()
    runs[(layout, keep)].append((float(step), float(wait)))
print(f"{'layout':<18} {'kept: step_s':>13} {'comm_wait_s':>12} {'unkept: step_s':>15} {'comm_wait_s':>12} {'kept/unkept':>12}")
for layout in dict.fromkeys(l for l, _ in runs):
    k = [statistics.median(v[i] for v in runs[(layout, "1")]) for i in (0, 1)]
    u = [statistics.median(v[i] for v in runs[(layout, "0")]) for i in (0, 1)]
    print(f"{layout:<18} {k[0]:13.4f} {k[1]:12.4f} {u[0]:15.4f} {u[1]:12.4f} {k[0] / u[0]:12.3f}")
PY
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
