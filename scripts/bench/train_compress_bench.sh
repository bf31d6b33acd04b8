#!/usr/bin/env bash
# Compressed data-parallel communication (issue 47) against full precision, in one run of this
# script: configs/tiny-cpu.yaml's model (4 layers of d_model 128 over the 1024-token BPE learned
# from Tiny Shakespeare) with run.seed 777 (the tests use another model and seed), trained on
# Tiny Shakespeare alone at 4 ranks posing as 2 nodes x 2 (comm.ranks_per_node 2) with ZeRO-1,
# under a simulated inter-node link (comm.simulate_link, default 10 Gb/s and 5 us), once per
# scheme:
#   full       no compression;
#   int8       int8 gradients (one all-to-all) and int8 weight differences;
#   two-level  gradients 8 bits within a node and 4 bits across (Hadamard smoothing, error
#              feedback), int4 weight differences: the SDP4Bit-style scheme;
#   naive-int4 int4 gradients and int4 weights themselves (no differences, no smoothing, nearest
#              rounding): what the careful schemes are measured against.
# Prints, per scheme: the final validation loss and its gap to full precision, the bytes each
# rank sent per step for dp (and the ratio to full precision) and the simulated link's time and
# the part the ranks waited for. Step times come from separate short runs (TIMING_STEPS steps,
# TIMING_ROUNDS rounds with the schemes alternated, so a machine whose load drifts charges every
# scheme alike): the median step of each run, the median over the rounds, at LINK_GBPS and at
# SLOW_GBPS (a link as slow against this small model's compute as 10 Gb/s is against a model a
# few hundred times larger). Writes the training-loss curves to docs/bench/train_compress_loss.png
# (PLOT=0 skips it).
# Usage: train_compress_bench.sh <bin dir> [work dir, default a new /tmp dir] [steps, 500]
# Environment: LINK_GBPS (10), LINK_US (5), SLOW_GBPS (0.2), SCHEMES (all four, space
# separated), TIMING_STEPS (60), TIMING_ROUNDS (2).
set -euo pipefail
BIN=${1:?usage: train_compress_bench.sh <bin dir> [work dir] [steps]}
BIN=$(cd "$BIN" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${2:-$(mktemp -d /tmp/ms_compress_XXXXXX)}
STEPS=${3:-500}
LINK_GBPS=${LINK_GBPS:-10}
LINK_US=${LINK_US:-5}
SCHEMES=${SCHEMES:-full int8 two-level naive-int4}
SLOW_GBPS=${SLOW_GBPS:-0.2}
TIMING_STEPS=${TIMING_STEPS:-60}
TIMING_ROUNDS=${TIMING_ROUNDS:-2}
mkdir -p "$WORK/data"
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

echo "# train_compress_bench.sh: $(uname -n), $(nproc --all) CPUs, $(date -u +%Y-%m-%dT%H:%MZ), $STEPS steps, 4 ranks as 2 nodes x 2, link $LINK_GBPS Gb/s + $LINK_US us"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -f data/shakespeare.plan ]; then
  "$BIN/ms-data" tokenizer train --input "$SRC/data/corpus/tinyshakespeare.txt" --vocab-size 1024 \
    --output data/shakespeare.tokenizer.json > data/tokenizer.log 2>&1 || { cat data/tokenizer.log; exit 1; }
  "$BIN/ms-data" build --input "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    --no-append-eos --tokenizer data/shakespeare.tokenizer.json --output data/shakespeare \
    --no-progress > /dev/null
  cat > data/plan.yaml <<YAML
seq_len: 128
seed: 777
total_samples: $((STEPS * 16))
validation: {fraction: 0.02, samples: 64}
sources:
  - {name: shakespeare, prefix: data/shakespeare, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config data/plan.yaml --output data/shakespeare.plan > /dev/null
fi

args_of() {
  case $1 in
    full) ;;
    int8) echo "--set parallel.compress.grads=int8 --set parallel.compress.weights=int8" ;;
    two-level) echo "--set parallel.compress.grads=two-level --set parallel.compress.weights=int4
                     --set parallel.compress.hadamard=true --set parallel.compress.error_feedback=true" ;;
    naive-int4) echo "--set parallel.compress.grads=int4 --set parallel.compress.weights=int4
                      --set parallel.compress.weight_diff=false --set parallel.compress.rounding=nearest" ;;
    *) echo "unknown scheme $1" >&2; exit 2 ;;
  esac
}

run() {  # run <run dir> <scheme> <steps> <gbps> [--set ...]
  local dir=$1 scheme=$2 steps=$3 gbps=$4
  shift 4
  [ -f "$dir.done" ] && return 0
  rm -rf "$dir"
  # shellcheck disable=SC2046  # args_of prints several --set arguments
  mpirun --oversubscribe -np 4 "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" \
    --set run.dir="$dir" --set run.seed=777 --set data.plan=data/shakespeare.plan \
    --set parallel.dp=4 --set train.steps="$steps" --set train.log_every=100 \
    --set checkpoint.every=0 --set comm.ranks_per_node=2 \
    --set comm.simulate_link.gbps="$gbps" --set comm.simulate_link.latency_us="$LINK_US" \
    $(args_of "$scheme") "$@" > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  touch "$dir.done"
}

for scheme in $SCHEMES; do
  run "$WORK/$scheme" "$scheme" "$STEPS" "$LINK_GBPS" --set train.eval_every=100
done
for round in $(seq "$TIMING_ROUNDS"); do
  for gbps in "$LINK_GBPS" "$SLOW_GBPS"; do
    for scheme in $SCHEMES; do
      run "$WORK/time-$gbps-$scheme-$round" "$scheme" "$TIMING_STEPS" "$gbps" \
        --set train.eval_every=0
    done
  done
done

python3 - "$WORK" "$SRC" "${PLOT:-1}" "$LINK_GBPS" "$SLOW_GBPS" "$TIMING_ROUNDS" $SCHEMES <<'PY'
import json, re, statistics, subprocess, sys
work, src, plot = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
gbps, slow, rounds, schemes = sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7:]

def steps_of(run):
    return [json.loads(l) for l in open(f"{work}/{run}/telemetry/rank-00000.jsonl")
            if '"kind":"step"' in l]

def timing(link, s):
    # Median step (after the first 10) of each round's run, then the median over the rounds.
    return statistics.median(statistics.median(r["step_s"] for r in steps_of(f"time-{link}-{s}-{k}")[10:])
                             for k in range(1, rounds + 1))

rows, curves = {}, {}
for s in schemes:
    log = open(f"{work}/{s}.log").read()
    evals = re.findall(r"eval step (\d+) \| val_loss ([0-9.]+)", log)
    sent = re.search(r"dp compression: sent ([0-9.]+) MiB per step .* against ([0-9.]+) MiB", log)
    link = re.search(r"simulated link .*: dp sent ([0-9.]+) MiB per step to other nodes and "
                     r"([0-9.]+) within its node; link time ([0-9.]+)s, of which ([0-9.]+)s", log)
    steps = steps_of(s)
    curves[s] = [(r["step"], r["loss"]) for r in steps]
    rows[s] = dict(val=float(evals[-1][1]), step_s=timing(gbps, s), slow_s=timing(slow, s),
                   sent=float(sent.group(1)) if sent else None,
                   full=float(sent.group(2)) if sent else None,
                   link_s=float(link.group(3)) if link else 0.0,
                   waited_s=float(link.group(4)) if link else 0.0)
full_bytes = next((r["full"] for r in rows.values() if r["full"]), None)
ref = rows.get("full")
print(f"| scheme | final val loss | vs full | dp MiB sent per step per rank | fewer bytes | "
      f"link time s (waited), {gbps} Gb/s | step s at {gbps} Gb/s | vs full | step s at {slow} Gb/s | vs full |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s in schemes:
    r = rows[s]
    sent = r["sent"] if r["sent"] is not None else full_bytes
    gap = f"{(r['val'] / ref['val'] - 1) * 100:+.2f}%" if ref else "-"
    ratio = f"{full_bytes / sent:.2f}x" if full_bytes and sent else "-"
    speed = f"{r['step_s'] / ref['step_s']:.3f}" if ref else "-"
    slow_speed = f"{r['slow_s'] / ref['slow_s']:.3f}" if ref else "-"
    print(f"| {s} | {r['val']:.4f} | {gap} | {sent if sent is not None else float('nan'):.3f} | "
          f"{ratio} | {r['link_s']:.2f} ({r['waited_s']:.2f}) | {r['step_s']:.3f} | {speed} | "
          f"{r['slow_s']:.3f} | {slow_speed} |")
if plot:
    colors = [[0, 0, 0], [31, 119, 180], [44, 160, 44], [214, 39, 40]]
    def smooth(points, k=25):
        out = []
        for i in range(len(points)):
            window = points[max(0, i - k + 1):i + 1]
            out.append([points[i][0], sum(p[1] for p in window) / len(window)])
        return out
    spec = {"x_label": "step", "y_label": "train loss (mean of 25 steps)", "hline": None,
            "series": [{"name": s, "color": colors[i % 4], "points": smooth(curves[s])[10:]}
                       for i, s in enumerate(schemes)]}
    json.dump(spec, open(f"{work}/curves.json", "w"))
    subprocess.run([sys.executable, f"{src}/scripts/bench/plot_curves_png.py", f"{work}/curves.json",
                    f"{src}/docs/bench/train_compress_loss.png"], check=True)
    print(f"# curves: docs/bench/train_compress_loss.png")
PY
