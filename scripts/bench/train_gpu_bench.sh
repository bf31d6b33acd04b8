#!/usr/bin/env bash
# ms-train on one GPU beside PyTorch on the same GPU, in one call (issue 42's benchmark): a
# Llama-shaped model of about 1.1B parameters (d_model 2048, 16 layers, 16 heads with 8
# key/value heads, d_ff 5632, the GPT-2 vocabulary of 50257, sequence 2048) trained with AdamW
# for a few steps, in bf16 mixed precision and in f32 (TF32 off). Reports tokens/s, MFU against
# the device's dense peak at each precision, ms-train's device-arena peak, and PyTorch's eager
# (SDPA) f32, eager bf16 autocast and torch.compile bf16 runs of the same model
# (train_gpu_bench_torch.py); the ratio column is ms-train bf16's tokens/s over each run's.
#
# Usage: train_gpu_bench.sh DIR OUT_DIR
#   DIR: a gpu_bundle.sh folder (ms-train, ms-data, train_data/, this script's Python twin).
#   OUT_DIR: receives data/, run_<precision>/, ms_train_<precision>.log, torch_*.json and
#   train_gpu_bench.md.
# Environment: GPU_BENCH_DEVICE (cuda:0; `cpu` tries the plumbing without a GPU),
# GPU_BENCH_SHAPE ("d_model layers heads kv_heads d_ff seq", default "2048 16 16 8 5632 2048"),
# GPU_BENCH_STEPS (6 timed, after 2 warm-up steps), GPU_BENCH_TORCH (python3), GPU_BENCH_COMPILE
# (1: also torch.compile).
set -uo pipefail
dir=$(cd "${1:?usage: train_gpu_bench.sh DIR OUT_DIR}" && pwd)
out=${2:?usage: train_gpu_bench.sh DIR OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
device=${GPU_BENCH_DEVICE:-cuda:0}
read -r d_model layers heads kv_heads d_ff seq <<<"${GPU_BENCH_SHAPE:-2048 16 16 8 5632 2048}"
steps=${GPU_BENCH_STEPS:-6}
warmup=2
python=${GPU_BENCH_TORCH:-python3}
# shellcheck source=scripts/bench/gpu_env.sh
source "$dir/gpu_env.sh" "$dir"

echo "== data (sequence $seq)"
if [[ ! -e $out/data/bench.plan ]]; then
  mkdir -p "$out/data"
  "$dir/ms-data" build -i "$dir/train_data/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$dir/train_data/tokenizer.json" \
    -o "$out/data/shakespeare" --no-progress > /dev/null || { echo "ms-data build failed"; exit 1; }
  printf 'seq_len: %s\ntotal_samples: 512\nvalidation: {fraction: 0.02, samples: 4}\nsources:\n  - {name: shakespeare, prefix: %s, weight: 1.0}\n' \
    "$seq" "$out/data/shakespeare" > "$out/data/mix.yaml"
  "$dir/ms-data" plan --config "$out/data/mix.yaml" --output "$out/data/bench.plan" > /dev/null ||
    { echo "ms-data plan failed"; exit 1; }
fi

# ours <precision>: the timed steps' tokens/s and MFU (the log line's, against the peak at that
# precision) and the arena's peak, after the warm-up steps; a failed run prints nothing.
ours() {
  local precision=$1 log="$out/ms_train_$1.log"
  echo "== ms-train on $device, $precision" >&2
  rm -rf "${out:?}/run_$precision"
  "$dir/ms-train" --config "$dir/train_configs/tiny-dense.yaml" --set data.plan="$out/data/bench.plan" \
    --set run.dir="$out/run_$precision" --set train.device="$device" --set train.precision="$precision" \
    --set train.steps=$((steps + warmup)) --set parallel.dp=1 --set train.global_batch=1 \
    --set train.micro_batch=1 --set train.seq_len="$seq" --set model.max_seq_len="$seq" \
    --set model.vocab_size=50257 --set model.d_model="$d_model" --set model.n_layers="$layers" \
    --set model.n_heads="$heads" --set model.n_kv_heads="$kv_heads" --set model.d_ff="$d_ff" \
    --set model.tie_embeddings=false --set train.eval_every=0 --set checkpoint.every=0 \
    --set train.log_every=1 > "$log" 2>&1
  local rc=$?
  tail -n 4 "$log" >&2
  # The run ends with a checkpoint (weights and optimizer state); a failure there still leaves
  # the timed steps to report, and is said.
  if [[ $rc -ne 0 ]]; then
    echo "ms-train $precision failed (rc $rc)" >&2
    grep -qE 'step [0-9]+/[0-9]+ \| loss' "$log" || return 1
  fi
  local mem
  mem=$(grep -oE 'device memory: peak [0-9.]+ MiB' "$log" | grep -oE '[0-9.]+' || echo -)
  grep -E 'step [0-9]+/[0-9]+ \| loss' "$log" | tail -n "$steps" |
    sed -E 's/.*tok\/s ([0-9.]+).*mfu ([0-9.]+)%.*/\1 \2/' |
    awk -v mem="$mem" '{t += $1; m += $2; n++} END {if (n) printf "%.1f %.2f %s\n", t / n, m / n, mem}'
}
read -r bf16_tps bf16_mfu bf16_mem < <(ours bf16)
read -r f32_tps f32_mfu f32_mem < <(ours f32)
peak=$(grep -ohE 'f32 dense peak [0-9.]+' "$out"/ms_train_*.log | head -n1 | grep -oE '[0-9.]+$' || echo 0)
bf16_peak=$(grep -ohE 'bf16 dense peak [0-9.]+' "$out"/ms_train_*.log | head -n1 | grep -oE '[0-9.]+$' || echo 0)
gpu=$(grep -ohE '^.*: f32 dense peak' "$out"/ms_train_*.log | sed -E 's/.*\] //; s/: f32 dense peak//' | head -n1)

torch_run() {  # torch_run <name> <extra args...>
  local name=$1
  shift
  timeout 240 "$python" "$dir/train_gpu_bench_torch.py" --device "${device%%:*}" \
    --d_model "$d_model" --layers "$layers" --heads "$heads" --kv_heads "$kv_heads" --d_ff "$d_ff" \
    --seq "$seq" --steps "$steps" --warmup "$warmup" "$@" > "$out/torch_$name.json" 2> "$out/torch_$name.err" ||
    { echo "torch $name failed: $(tail -n 2 "$out/torch_$name.err")"; return 1; }
  cat "$out/torch_$name.json"
}
field() { sed -E "s/.*\"$2\": ([0-9.e+-]+).*/\1/" "$out/torch_$1.json" 2>/dev/null; }
echo "== PyTorch"
torch_run eager_f32 --dtype f32 --peak_gflops "${peak:-0}"
torch_run eager_bf16 --dtype bf16 --peak_gflops "${bf16_peak:-0}"
if [[ ${GPU_BENCH_COMPILE:-1} == 1 ]]; then
  torch_run compile_bf16 --dtype bf16 --compile --peak_gflops "${bf16_peak:-0}"
fi

{
  echo "# ms-train on one GPU beside PyTorch ($(date -u +%F), ${gpu:-$device})"
  echo
  echo "Shape: d_model $d_model, $layers layers, $heads heads ($kv_heads kv), d_ff $d_ff, vocab 50257, sequence $seq, micro-batch 1, AdamW; $steps timed steps after $warmup."
  echo "f32 peak ${peak:-?} GFLOP/s, bf16 peak ${bf16_peak:-?} GFLOP/s (architecture table at the maximum clock)."
  echo
  echo "| run | precision | tokens/s | MFU | peak memory MiB | ms-train / this |"
  echo "|---|---|---|---|---|---|"
  echo "| ms-train | bf16 | ${bf16_tps:-failed} | ${bf16_mfu:-?}% (bf16 peak) | ${bf16_mem:--} (arena) | 1.00 |"
  awk -v t="${f32_tps:-0}" -v m="${f32_mfu:-?}" -v mem="${f32_mem:--}" -v ours="${bf16_tps:-0}" \
    'BEGIN { printf "| ms-train | f32 | %.1f | %s%% (f32 peak) | %s (arena) | %.2f |\n", t, m, mem,
             (t > 0 ? ours / t : 0) }'
  for name in eager_f32 eager_bf16 compile_bf16; do
    [[ -s $out/torch_$name.json ]] || continue
    tps=$(field "$name" tokens_per_s)
    mfu=$(field "$name" mfu)
    mem=$(field "$name" peak_mem_mib)
    precision=${name##*_}
    awk -v n="PyTorch ${name%_*}" -v p="$precision" -v t="$tps" -v m="$mfu" -v mem="$mem" -v ours="${bf16_tps:-0}" \
      'BEGIN { printf "| %s | %s | %.1f | %s | %s | %.2f |\n", n, p, t,
               (m == "" || m ~ /[a-z]/) ? "-" : sprintf("%.1f%% (%s peak)", m * 100, p),
               (mem == "" || mem ~ /[a-z]/) ? "-" : mem, (t > 0 ? ours / t : 0) }'
  done
} | tee "$out/train_gpu_bench.md"
