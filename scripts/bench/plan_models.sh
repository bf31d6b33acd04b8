# Sourced by the benchmarks that train the layout planner benchmark's models
# (plan_layouts_bench.sh, train_heap_bench.sh; train_pp_bench.sh takes the data), so that they
# run the same data and models:
#   plan_bench_data <bin dir> <work dir>
#       Tiny Shakespeare with a 1024-token BPE trained on it, planned as 4000 samples of 128
#       tokens: writes work/s128.plan (with tokenizer.json, the shakespeare dataset and
#       mix.yaml) unless it is there.
#   PLAN_DENSE_MODEL   the dense model's --set list: 8 layers of d_model 256, 8 heads, d_ff 704,
#                      1024-token vocabulary, sequence 128, global batch 8.
#   PLAN_HELDOUT_MODEL the held-out model's, given after PLAN_DENSE_MODEL (later --set values
#                      win): 6 layers of d_model 384, 12 heads over 4 KV heads, d_ff 1024,
#                      global batch 16.
plan_bench_data() {
  local bin=$1 work=$2 src
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  [ -f "$work/s128.plan" ] && return 0
  "$bin/ms-data" tokenizer train --input "$src/data/corpus/tinyshakespeare.txt" --vocab-size 1024 \
    --output "$work/tokenizer.json" > /dev/null
  "$bin/ms-data" build -i "$src/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    -t "$work/tokenizer.json" -o "$work/shakespeare" --threads 2 --no-progress > /dev/null
  cat > "$work/mix.yaml" <<YAML
seq_len: 128
total_samples: 4000
validation: {fraction: 0.02, samples: 16}
sources:
  - {name: shakespeare, prefix: $work/shakespeare, weight: 1.0}
YAML
  "$bin/ms-data" plan --config "$work/mix.yaml" --output "$work/s128.plan" > /dev/null
}

# shellcheck disable=SC2034  # used by the scripts that source this file
PLAN_DENSE_MODEL=(--set model.vocab_size=1024 --set model.d_model=256 --set model.n_layers=8
                  --set model.n_heads=8 --set model.n_kv_heads=8 --set model.d_ff=704
                  --set model.max_seq_len=128 --set train.seq_len=128 --set train.global_batch=8
                  --set model.tie_embeddings=false)
# shellcheck disable=SC2034
PLAN_HELDOUT_MODEL=(--set model.d_model=384 --set model.n_layers=6 --set model.n_heads=12
                    --set model.n_kv_heads=4 --set model.d_ff=1024 --set train.global_batch=16)
