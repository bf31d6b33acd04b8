# Setup shared by the e2e scripts that train (sourced after BIN, SRC and work are set): the
# Tiny Shakespeare token dataset built with ms-data (GPT-2 tokenizer) and a mixture plan over it.

# shakespeare_plan <seq_len> <total samples> <validation samples>: writes $work/s<seq_len>.plan,
# building $work/shakespeare first if this script has not yet.
shakespeare_plan() {
  local seq=$1 samples=$2 validation=$3
  if [ ! -d "$work/shakespeare" ] && ! compgen -G "$work/shakespeare.*" > /dev/null; then
    "$BIN/ms-data" build -i "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
      -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o "$work/shakespeare" --threads 2 \
      --no-progress > /dev/null
  fi
  cat > "$work/mix-$seq.yaml" <<YAML
seq_len: $seq
total_samples: $samples
validation: {fraction: 0.02, samples: $validation}
sources:
  - {name: shakespeare, prefix: $work/shakespeare, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config "$work/mix-$seq.yaml" --output "$work/s$seq.plan" > /dev/null
}

# The model keys every e2e training run shrinks a shipped config to: one tiny layer, small
# enough for CI, with grouped-query attention (2 heads over 1 key/value head).
TINY_MODEL=(--set model.d_model=16 --set model.n_layers=1 --set model.n_heads=2
            --set model.n_kv_heads=1 --set model.d_ff=32)
