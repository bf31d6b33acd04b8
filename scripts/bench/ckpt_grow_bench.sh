#!/usr/bin/env bash
# ms-ckpt grow against training from scratch (issue 48): on Tiny Shakespeare (GPT-2 tokenizer,
# seq 64, 8 samples a step), a small model (d_model 64, 4 layers, d_ff 176: configs/tiny-dense
# at seq 64) is trained SMALL_STEPS steps, grown 1.5x in width and depth (d_model 96, 6 layers,
# d_ff 264, heads 4 -> 6, kv heads 2 -> 3) with `ms-ckpt grow --restart-schedule` and trained on
# for STEPS steps; the same large model is trained STEPS steps from scratch in the same run.
# Both large runs use the same recipe (warmup, cosine over STEPS). Reported: the from-scratch
# model's final validation loss (the target), the first evaluation at which the grown run is at
# or below it, and the training FLOPs to get there (the small model's steps included, at the
# small model's FLOPs per token, which ms-train prints), against the from-scratch run's. The
# validation curves against training FLOPs go to docs/bench/ckpt_grow.png.
# Usage: scripts/bench/ckpt_grow_bench.sh BIN_DIR [WORK_DIR]
#   STEPS (240), SMALL_STEPS (120), EVAL_EVERY (20), PNG (docs/bench/ckpt_grow.png)
set -euo pipefail
BIN=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
STEPS=${STEPS:-240}
SMALL_STEPS=${SMALL_STEPS:-120}
EVAL_EVERY=${EVAL_EVERY:-20}
PNG=${PNG:-$SRC/docs/bench/ckpt_grow.png}
source "$SRC/tests/e2e/lib.sh"

echo "machine: $(uname -n), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "git: $(git -C "$SRC" rev-parse --short HEAD)"

samples=$(( (STEPS * 2 + SMALL_STEPS) * 8 + 512 ))
shakespeare_plan 64 "$samples" 64

SMALL=(--set model.d_model=64 --set model.n_layers=4 --set model.n_heads=4 --set model.n_kv_heads=2
       --set model.d_ff=176)
BIG=(--set model.d_model=96 --set model.n_layers=6 --set model.n_heads=6 --set model.n_kv_heads=3
     --set model.d_ff=264)

train() {  # train <name> <steps> [--set ...]
  local name=$1 steps=$2
  shift 2
  local start=$SECONDS
  "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set data.plan="$work/s64.plan" \
    --set run.dir="$work/$name" --set parallel.dp=1 --set model.max_seq_len=64 \
    --set train.seq_len=64 --set train.steps="$steps" --set train.global_batch=8 \
    --set train.micro_batch=8 --set train.eval_every="$EVAL_EVERY" --set train.eval_batches=8 \
    --set train.log_every=10 --set train.mfu_peak_gflops=1 --set checkpoint.every=0 \
    --set checkpoint.async=false "$@" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; echo "ms-train $name failed"; exit 1; }
  echo "$name: $steps steps in $((SECONDS - start)) s"
}

train small "$SMALL_STEPS" "${SMALL[@]}" --set checkpoint.resume=none
"$BIN/ms-ckpt" grow "$work/small/checkpoints" --to d_model=96,n_layers=6,d_ff=264 \
  --restart-schedule --output "$work/grown-ckpt" > "$work/grow.log" 2>&1 ||
  { cat "$work/grow.log"; exit 1; }
grep -v "saved:" "$work/grow.log"
read -r -a overrides <<< "$(sed -n 's/^resume training with: //p' "$work/grow.log")"
train grown "$STEPS" "${BIG[@]}" "${overrides[@]}" --set checkpoint.resume="$work/grown-ckpt"
train scratch "$STEPS" "${BIG[@]}" --set checkpoint.resume=none

python3 - "$work" "$SMALL_STEPS" "$PNG" "$SRC/scripts/bench/plot_curves_png.py" <<'PY'
import json, re, subprocess, sys
work, small_steps, png, plotter = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tokens_per_step = 8 * 64

def run(name):
    text = open(f"{work}/{name}.log").read()
    mflops = float(re.search(r"([0-9.]+) MFLOPs/token", text).group(1))
    evals = [(int(s), float(v)) for s, v in re.findall(r"eval step (\d+) \| val_loss ([0-9.]+)", text)]
    return mflops * 1e6 * tokens_per_step, evals

small_fps, small_ev = run("small")
big_fps, grown_ev = run("grown")
_, scratch_ev = run("scratch")
target_step, target = scratch_ev[-1]
small_flops = small_steps * small_fps
grown_at = next(((s, v) for s, v in grown_ev if v <= target), None)
print(f"training FLOPs per step: small {small_fps:.4g}, large {big_fps:.4g} "
      f"(ratio {small_fps / big_fps:.3f})")
print(f"small model after {small_steps} steps: val_loss {small_ev[-1][1]:.4f}")
print(f"grown run: starts at the small model's loss, first evaluation (step {grown_ev[0][0]}) "
      f"val_loss {grown_ev[0][1]:.4f}")
print(f"from scratch: final val_loss {target:.4f} at step {target_step}, "
      f"{target_step * big_fps:.4g} FLOPs")
if grown_at:
    steps = grown_at[0]
    flops = small_flops + steps * big_fps
    print(f"grown: val_loss {grown_at[1]:.4f} <= {target:.4f} at step {steps} "
          f"({steps / target_step:.3f}x the large-model steps), "
          f"{flops:.4g} FLOPs with the small model's ({flops / (target_step * big_fps):.3f}x; "
          f"saving {100 * (1 - flops / (target_step * big_fps)):.1f}%); "
          f"large-model steps alone {100 * (1 - steps / target_step):.1f}% fewer")
else:
    print(f"grown: never at or below {target:.4f} (final {grown_ev[-1][1]:.4f})")
print(f"final val_loss: grown {grown_ev[-1][1]:.4f}, scratch {target:.4f}")
print("step  small  grown  scratch")
for i, (s, v) in enumerate(scratch_ev):
    sm = dict(small_ev).get(s)
    gr = dict(grown_ev).get(s)
    print(f"{s:4d}  {'' if sm is None else f'{sm:.4f}':6}  {'' if gr is None else f'{gr:.4f}':6}  {v:.4f}")
spec = {
    "x_label": "training FLOPs (small model's included for the grown run)",
    "y_label": "validation loss",
    "hline": target,
    "series": [
        {"name": "large from scratch", "color": [200, 40, 40],
         "points": [[s * big_fps, v] for s, v in scratch_ev]},
        {"name": "small", "color": [60, 60, 200],
         "points": [[s * small_fps, v] for s, v in small_ev]},
        {"name": "grown from small (ms-ckpt grow)", "color": [20, 150, 60],
         "points": [[small_flops, small_ev[-1][1]]] +
                   [[small_flops + s * big_fps, v] for s, v in grown_ev]},
    ],
}
json.dump(spec, open(f"{work}/plot.json", "w"))
subprocess.run([sys.executable, plotter, f"{work}/plot.json", png], check=True)
print(f"plot: {png}")
PY
