# Sourced by the ms-infer benchmarks that need a model of the issue's size range: writes the
# random dense model MODEL names (GPT-2 vocabulary) with ms_infer_make_tiny_model and prints
# its shape. 290m: d_model 1024, 16 layers, d_ff 2816 (about 290 M parameters); 1b: d_model
# 2048, 16 layers, d_ff 5632 (about 960 M, 3.8 GB in f32).
# Usage: write_bench_model <model name> <model writer's bin dir> <output dir>
write_bench_model() {
  local name=$1 tools=$2 dir=$3 src shape
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  case $name in
    290m) shape=(--d-model 1024 --layers 16 --heads 16 --kv-heads 8 --d-ff 2816) ;;
    1b) shape=(--d-model 2048 --layers 16 --heads 16 --kv-heads 8 --d-ff 5632) ;;
    *) echo "MODEL must be 290m or 1b" >&2; return 1 ;;
  esac
  [ -x "$tools/ms_infer_make_tiny_model" ] || {
    echo "no $tools/ms_infer_make_tiny_model: pass a test build's bin dir" >&2
    return 1
  }
  echo "# model $name: ${shape[*]}"
  "$tools/ms_infer_make_tiny_model" --dir "$dir" \
    --tokenizer "$src/data/tokenizers/gpt2/tokenizer.json" "${shape[@]}" --max-seq-len 256 --seed 3
}
