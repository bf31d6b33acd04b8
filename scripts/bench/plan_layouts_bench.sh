#!/usr/bin/env bash
# ms-train plan against measured runs (issue 16, docs/benchmarks.md "Layout planner"): runs each
# layout below for 10 steps on this machine, takes the measured step time (median of steps 3-10
# from the run's telemetry, step_s) and peak resident memory per rank (the largest rss_bytes of
# the telemetry's host samples up to the last step, sampled every 0.1 s, the largest over the
# ranks), runs `ms-train plan --evaluate` on the same layout with the cluster file measured here
# first (`ms-train plan --profile --config`, one file per model), and prints predicted against
# measured with the error of each, the median and the worst.
# The cluster file's runtime_overhead_mib (what a trainer process holds besides the model: MPI,
# BLAS, the binary, the loader) is calibrated once from a run of a minimal model (1 layer of
# d_model 16): its measured peak minus the planner's figure for that model.
# 3 and 4 ranks on a 2-core machine are oversubscribed (the cluster file says 2 devices per
# node, so the planner slows compute by the ratio and takes links.oversubscribed for the
# collectives).
# SET=heldout runs another model (6 layers of d_model 384, 12 heads with 4 KV heads, d_ff 1024,
# global batch 16) over layouts the main set does not run (other micro-batches, dp x pp, dp 4,
# selective recomputation, grouped KV heads): a check of the model on shapes it was not
# developed against. It skips the published runs.
# The pick (issue 50): per rank count, `ms-train plan` recommends a layout of the dense model
# from the same cluster file; the recommendation is trained too where it is not one of the
# layouts above, and its measured rank among the dense layouts run at that rank count is
# printed with how far it is from the fastest measured. The machine's load (uptime) is printed
# at the start and the end, and the profile's own record of it (the cluster file's profile:
# load_share, the share of the CPU other processes took while it measured).
# Usage: [SET=main|heldout] scripts/bench/plan_layouts_bench.sh [build dir] [work dir] [steps]
set -euo pipefail
BUILD=${1:-build}
SET=${SET:-main}
WORK=${2:-/tmp/ms-plan-layouts-bench-$SET}
STEPS=${3:-10}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$BUILD/bin
source "$SRC/scripts/bench/plan_models.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$WORK"
echo "# start $(date -u +%FT%TZ), load: $(uptime)"
plan_bench_data "$BIN" "$WORK"
if [ ! -f "$WORK/s512.plan" ]; then  # the context-parallel model's 512-token sequences
  sed -e 's/^seq_len: 128/seq_len: 512/' -e 's/^total_samples: 4000/total_samples: 1000/' \
    "$WORK/mix.yaml" > "$WORK/mix512.yaml"
  "$BIN/ms-data" plan --config "$WORK/mix512.yaml" --output "$WORK/s512.plan" > /dev/null
fi

# The two models: dense (8 layers of d_model 256) and MoE (4 experts, top-2) for the ep layouts.
common=(--set data.plan="$WORK/s128.plan" --set train.steps="$STEPS" --set train.eval_every=0
        --set checkpoint.every=0 --set telemetry.trace=false --set train.mfu_peak_gflops=1
        --set telemetry.every_s=0.1
        --set train.log_every=1 --set optim.warmup_steps=1 "${PLAN_DENSE_MODEL[@]}")
if [ "$SET" = heldout ]; then common+=("${PLAN_HELDOUT_MODEL[@]}"); fi
moe=(--set model.moe.num_experts=4 --set model.moe.top_k=2 --set model.d_ff=352)
# The context-parallel layouts' model: 4 layers of d_model 128 on 512-token sequences, global
# batch 4 (the shipped configs/long-context.yaml is too slow for 2 cores).
cpm=(--set data.plan="$WORK/s512.plan" --set model.d_model=128 --set model.n_layers=4
     --set model.n_heads=4 --set model.n_kv_heads=4 --set model.d_ff=352
     --set model.max_seq_len=512 --set train.seq_len=512 --set train.global_batch=4
     --set train.micro_batch=2)
CONFIG=$SRC/configs/tiny-dense.yaml

# A cluster file per model, measured here with that model's op shapes and layers; 4 ranks on
# the node's cores, as the largest layouts run (one rank per core measures the concurrent times
# and the intra-node link, then all 4 the oversubscribed link).
profile() {  # profile <file> [model --set args...]
  local out=$1
  shift
  if [ ! -f "$out" ]; then
    mpirun --oversubscribe -np 4 "$BIN/ms-train" plan --profile "$out.tmp" --config "$CONFIG" \
      "${common[@]}" "$@" --profile-ranks 4 --profile-name cpu-2core > /dev/null
    mv "$out.tmp" "$out"
  fi
}
profile "$WORK/dense.cluster.yaml"
if [ "$SET" = main ]; then
  profile "$WORK/moe.cluster.yaml" "${moe[@]}"
  profile "$WORK/cp.cluster.yaml" "${cpm[@]}"
fi

peak_mib() {  # the largest rss_bytes over the ranks' host samples up to their last step
  python3 - "$1" <<'PY'
import json, sys, glob
peak = 0
for f in glob.glob(sys.argv[1] + "/telemetry/*.jsonl"):
    rows = [json.loads(l) for l in open(f)]
    last = max((r["t"] for r in rows if r.get("kind") == "step"), default=0)
    peak = max([peak] + [r.get("rss_bytes", 0) for r in rows if r.get("kind") == "host" and r["t"] <= last])
print(f"{peak / 2**20:.1f}")
PY
}

# Runtime overhead: a minimal model's measured peak minus its predicted model memory.
tiny=(--set model.d_model=16 --set model.n_layers=1 --set model.n_heads=1 --set model.n_kv_heads=1
      --set model.d_ff=32 --set train.micro_batch=1 --set parallel.dp=1)
if ! grep -q "^# calibrated" "$WORK/dense.cluster.yaml"; then
  rm -rf "$WORK/tiny"
  "$BIN/ms-train" --config "$CONFIG" --set run.dir="$WORK/tiny" "${common[@]}" "${tiny[@]}" \
    > "$WORK/tiny.out" 2>&1 || { cat "$WORK/tiny.out"; exit 1; }
  tiny_pred=$("$BIN/ms-train" plan --evaluate --json --config "$CONFIG" --cluster "$WORK/dense.cluster.yaml" \
                --ranks 1 "${common[@]}" "${tiny[@]}" |
              python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["peak_memory_mib"] - d["memory"][0]["runtime_mib"])')
  overhead=$(python3 -c "print(round(max(0, $(peak_mib "$WORK/tiny") - $tiny_pred), 1))")
  for f in "$WORK"/*.cluster.yaml; do
    sed -i -e "s/^runtime_overhead_mib: .*/runtime_overhead_mib: $overhead/" "$f"
    echo "# calibrated runtime_overhead_mib from a 1-layer d_model 16 run: $overhead" >> "$f"
  done
fi

median_step() {  # median step_s of steps 3..STEPS over rank 0's telemetry
  python3 - "$1" <<'PY'
import json, sys, statistics
steps = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "step" and 3 <= r.get("step", 0) <= 10:
        steps.append(r["step_s"])
print(f"{statistics.median(steps):.5f}")
PY
}

phases() {  # "fwd bwd wait optim": medians over steps 3..10 of rank 0's telemetry phases
  python3 - "$1" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r["phases"] for r in rows if r.get("kind") == "step" and 3 <= r.get("step", 0) <= 10]
print(" ".join("%.4f" % statistics.median(r[k] for r in rows)
               for k in ("fwd_s", "bwd_s", "comm_wait_s", "optim_s")))
PY
}

grep -h "^profile:" "$WORK"/*.cluster.yaml | sed 's/^/# cluster file /'
printf "%-34s %4s %10s %10s %7s %10s %10s %7s\n" layout np pred_s meas_s err% pred_MiB meas_MiB err%
: > "$WORK/errors.txt"
: > "$WORK/phases.txt"
: > "$WORK/measured.txt"
# GROUP: which runs a rank count's recommendation is ranked among (the dense model at the
# main set's global batch); other models and batches set their own.
run() {  # [GROUP=name] run <label> <ranks> <cluster> [--set args...]
  local label=$1 np=$2 cluster=$3 group=${GROUP:-dense}
  shift 3
  rm -rf "${WORK:?}/$label"
  mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np "$np" \
    "$BIN/ms-train" --config "$CONFIG" --set run.dir="$WORK/$label" "${common[@]}" "$@" \
    > "$WORK/$label.out" 2>&1 || { cat "$WORK/$label.out"; exit 1; }
  local meas_s meas_mib pred pred_s pred_mib
  meas_s=$(median_step "$WORK/$label/telemetry/$(ls "$WORK/$label/telemetry" | head -1)")
  meas_mib=$(peak_mib "$WORK/$label")
  pred=$("$BIN/ms-train" plan --evaluate --json --config "$CONFIG" --cluster "$cluster" \
           --ranks "$np" --set run.dir="$WORK/$label" "${common[@]}" "$@")
  pred_s=$(python3 -c 'import json,sys; print("%.5f" % json.loads(sys.argv[1])["step_s"])' "$pred")
  pred_mib=$(python3 -c 'import json,sys; print("%.1f" % json.loads(sys.argv[1])["peak_memory_mib"])' "$pred")
  python3 -c 'import json,sys; print(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], json.loads(sys.argv[1])["name"].replace(" ", "_"))' \
    "$pred" "$group" "$np" "$meas_s" "$label" >> "$WORK/measured.txt"
  python3 - "$label" "$np" "$pred_s" "$meas_s" "$pred_mib" "$meas_mib" "$WORK/errors.txt" <<'PY'
import sys
label, np, ps, ms, pm, mm, errs = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7]), sys.argv[7]
es, em = (ps / ms - 1) * 100, (pm / mm - 1) * 100
print(f"{label:<34} {np:>4} {ps:10.4f} {ms:10.4f} {es:+7.1f} {pm:10.1f} {mm:10.1f} {em:+7.1f}")
open(errs, "a").write(f"{label} {es} {em}\n")
PY
  # Per phase, pipeline rank 0: the telemetry's forward, backward, communication wait and
  # optimizer against the planner's forward, backward and optimizer (what is left of its step
  # is bubble, exposed dp reduction and step overhead).
  python3 - "$label" "$pred" $(phases "$WORK/$label/telemetry/$(ls "$WORK/$label/telemetry" | head -1)") \
    >> "$WORK/phases.txt" <<'PY'
import json, sys
label, d = sys.argv[1], json.loads(sys.argv[2])
f, b, w, o = map(float, sys.argv[3:7])
print(f"{label:<34} fwd {d['forward_s']:.4f}/{f:.4f}  bwd {d['backward_s']:.4f}/{b:.4f}  "
      f"optim {d['optimizer_s']:.4f}/{o:.4f}  comm_wait -/{w:.4f}  (predicted/measured s)")
PY
}

D=$WORK/dense.cluster.yaml
M=$WORK/moe.cluster.yaml
C=$WORK/cp.cluster.yaml
if [ "$SET" = heldout ]; then
run "dp1-mb4"             1 "$D" --set train.micro_batch=4
run "dp2-zero1-mb2"       2 "$D" --set parallel.zero=1 --set train.micro_batch=2
run "tp2-mb4-rc-selective" 2 "$D" --set parallel.tp=2 --set train.micro_batch=4 --set parallel.recompute=selective
run "pp2-1f1b-mb2"        2 "$D" --set parallel.pp=2 --set train.micro_batch=2
run "pp2-dp2-1f1b-mb2"    4 "$D" --set parallel.pp=2 --set train.micro_batch=2
run "pp2-zb-mb1"          2 "$D" --set parallel.pp=2 --set parallel.schedule=zero-bubble --set train.micro_batch=1
run "dp4"                 4 "$D"
run "tp2-dp2-mb2-zero1"   4 "$D" --set parallel.tp=2 --set train.micro_batch=2 --set parallel.zero=1
run "tp2-pp2-mb4"         4 "$D" --set parallel.tp=2 --set parallel.pp=2 --set train.micro_batch=4
else
run "dp1"                 1 "$D"
run "dp2"                 2 "$D"
run "tp2"                 2 "$D" --set parallel.tp=2
run "pp2-1f1b-mb1"        2 "$D" --set parallel.pp=2 --set train.micro_batch=1
run "dp2-tp2"             4 "$D" --set parallel.tp=2
run "pp2-tp2-zb"          4 "$D" --set parallel.pp=2 --set parallel.tp=2 --set parallel.schedule=zero-bubble --set train.micro_batch=2
run "pp2-vpp2-interleaved" 2 "$D" --set parallel.pp=2 --set parallel.vpp=2 --set parallel.schedule=interleaved --set train.micro_batch=2
GROUP=gb12 run "dp3-zero0"       3 "$D" --set train.global_batch=12 --set parallel.dp=3 --set parallel.zero=0
GROUP=moe run "moe-ep2"          2 "$M" "${moe[@]}" --set parallel.ep=2
GROUP=moe run "moe-dp2-ep1-rc-full" 2 "$M" "${moe[@]}" --set parallel.recompute=full
GROUP=moe run "moe-ep2-tp2"      4 "$M" "${moe[@]}" --set parallel.ep=2 --set parallel.tp=2
GROUP=seq512 run "seq512-cp2"     2 "$C" "${cpm[@]}" --set parallel.cp=2
GROUP=seq512 run "seq512-cp2-dp2" 4 "$C" "${cpm[@]}" --set parallel.cp=2 --set parallel.dp=2
fi
# The recommendation at 2 and 4 ranks, trained where it is not among the runs above, and its
# measured rank among the dense runs of that rank count.
: > "$WORK/picks.txt"
for np in 2 4; do
  rec=$("$BIN/ms-train" plan --json --config "$CONFIG" --cluster "$D" --ranks "$np" "${common[@]}")
  name=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["recommended"]["name"].replace(" ", "_"))' "$rec")
  if ! awk -v n="$name" -v np="$np" '$1 == "dense" && $2 == np && $5 == n {found=1} END {exit !found}' "$WORK/measured.txt"; then
    mapfile -t flags < <(python3 -c 'import json,sys
d = json.loads(sys.argv[1])
for f in d["layouts"][d["recommended"]["index"]]["set"]: print("--set"); print(f)' "$rec")
    run "recommended-np$np" "$np" "$D" "${flags[@]}"
  fi
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["recommended"]; print("# np", sys.argv[2], "recommended:", r["name"], "(%d ties):" % r["ties"], r["reason"])' "$rec" "$np" >> "$WORK/picks.txt"
  python3 - "$WORK/measured.txt" "$np" "$name" >> "$WORK/picks.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
np, name = sys.argv[2], sys.argv[3]
runs = sorted((float(r[2]), r[3], r[4]) for r in rows if r[0] == "dense" and r[1] == np)
rank = next(i for i, r in enumerate(runs) if r[2] == name) + 1
rec = runs[rank - 1][0]
print(f"# np {np}: the recommendation {name.replace('_', ' ')} measured {rec:.4f} s, rank {rank} of "
      f"{len(runs)} dense layouts run, {(rec / runs[0][0] - 1) * 100:+.1f}% against the fastest "
      f"({runs[0][1]}, {runs[0][0]:.4f} s)")
PY
done

python3 - "$WORK/errors.txt" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
t = [abs(float(r[1])) for r in rows]; m = [abs(float(r[2])) for r in rows]
wt = max(rows, key=lambda r: abs(float(r[1]))); wm = max(rows, key=lambda r: abs(float(r[2])))
print(f"# step time: median |error| {statistics.median(t):.1f}%, worst {wt[0]} {float(wt[1]):+.1f}%")
print(f"# peak memory: median |error| {statistics.median(m):.1f}%, worst {wm[0]} {float(wm[2]):+.1f}%")
PY
echo "# per phase, pipeline rank 0"
cat "$WORK/phases.txt"
echo "# the pick"
cat "$WORK/picks.txt"
echo "# end $(date -u +%FT%TZ), load: $(uptime)"
[ "$SET" = main ] || exit 0

# Published large-scale runs, predicted from the shipped GPU cluster files (docs/benchmarks.md
# gives the published figures and sources). The model shapes come from --set; nothing is
# allocated.
echo "# published runs"
published() {  # published <label> <cluster> <ranks> [--set args...]
  local label=$1 cluster=$2 ranks=$3
  shift 3
  "$BIN/ms-train" plan --evaluate --json --config "$CONFIG" --cluster "$cluster" --ranks "$ranks" "$@" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); r=int(sys.argv[2])
print("%-34s %s: step %.2f s, %.0f tok/s/GPU, MFU %.1f%%, bubble %.1f%%, peak %.1f GiB" % (sys.argv[1],
      d["name"], d["step_s"], d["tokens_per_s"] / r, d["mfu"] * 100, d["bubble"] * 100, d["peak_memory_mib"] / 1024))' "$label" "$ranks"
}
# NeMo 24.12 performance summary: Llama-3 70B, 64 H100, FP8, GBS 128, MBS 1, seq 8192,
# TP 4, PP 4, CP 2, VP 5 (dp 2).
sed 's/^  dtype: bf16/  dtype: fp8/' "$SRC/configs/clusters/h100-8x.yaml" > "$WORK/h100-fp8.yaml"
published "llama3-70b-h100-fp8-nemo" "$WORK/h100-fp8.yaml" 64 \
  --set model.vocab_size=128256 --set model.d_model=8192 --set model.n_layers=80 \
  --set model.n_heads=64 --set model.n_kv_heads=8 --set model.d_ff=28672 \
  --set model.max_seq_len=8192 --set train.seq_len=8192 --set train.global_batch=128 \
  --set model.tie_embeddings=false --set train.micro_batch=1 --set parallel.dp=2 \
  --set parallel.cp=2 --set parallel.tp=4 --set parallel.pp=4 --set parallel.vpp=5 --set parallel.schedule=interleaved
# MegaScale (NSDI 2024): 175B on 12,288 GPUs, batch 6144, seq 2048, MFU 55.2%; GPT-3 175B shape
# with the parallel block, its 4x GELU MLP as a SwiGLU of the same parameter count.
published "megascale-175b-12288-a100" "$SRC/configs/clusters/a100-8x.yaml" 12288 \
  --set model.vocab_size=50257 --set model.d_model=12288 --set model.n_layers=96 \
  --set model.n_heads=96 --set model.n_kv_heads=96 --set model.d_ff=32768 \
  --set model.max_seq_len=2048 --set train.seq_len=2048 --set train.global_batch=6144 \
  --set model.parallel_block=true --set model.tie_embeddings=false --set train.micro_batch=1 \
  --set parallel.dp=192 --set parallel.tp=8 --set parallel.pp=8 --set parallel.vpp=6 \
  --set parallel.schedule=interleaved
