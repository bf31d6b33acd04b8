#!/usr/bin/env bash
# Speculative decoding with a trained draft/target pair: both models are trained by ms-train on
# Tiny Shakespeare (the demo's data: BPE 1024 learned from the corpus, the mix-shakespeare plan),
# the target as configs/tiny-cpu.yaml widened to 6 layers of d_model 256 and the draft as a
# 1-layer, d_model 64 model of the same tokenizer. Then ms-infer completes 32 lines from the corpus's
# last 10% greedily at batch 1, by the target alone and with the draft (k = 2 and 4), and prints
# both summaries (tokens/s, acceptance, tokens per target forward) and whether the outputs are
# token-for-token equal, as greedy speculative decoding must leave them. The models may have
# seen those lines in training; what matters here is how often the two models agree.
# Usage: infer_spec_trained.sh <bin dir> [work dir, default a new /tmp dir] [train steps, 400]
set -euo pipefail
BIN=${1:?usage: infer_spec_trained.sh <bin dir> [work dir] [train steps]}
BIN=$(cd "$BIN" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${2:-$(mktemp -d /tmp/ms_spec_trained_XXXXXX)}
STEPS=${3:-400}
# The target: tiny-cpu widened to d_model 256 and 6 layers (5.5 M parameters), so its forward
# costs far more than the 1-layer d_model 64 draft's (0.12 M); TARGET overrides the shape
# (TARGET="" trains tiny-cpu as it is).
TARGET=${TARGET---set model.d_model=256 --set model.n_layers=6 --set model.n_heads=8 --set model.n_kv_heads=8 --set model.d_ff=704}
mkdir -p "$WORK/data"
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

echo "# infer_spec_trained.sh: $(uname -n), $(nproc --all) CPUs, $STEPS training steps per model"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -f data/shakespeare.plan ]; then
  "$BIN/ms-data" tokenizer train --input "$SRC/data/corpus/tinyshakespeare.txt" --vocab-size 1024 \
    --output data/shakespeare.tokenizer.json > /dev/null
  "$BIN/ms-data" build --input "$SRC/data/corpus/tinyshakespeare.txt" --doc-separator blank-line \
    --no-append-eos --tokenizer data/shakespeare.tokenizer.json --output data/shakespeare \
    --no-progress > /dev/null
  "$BIN/ms-data" build --input "$SRC/data/corpus/arithmetic.jsonl.zst" \
    --tokenizer data/shakespeare.tokenizer.json --output data/arithmetic --no-progress > /dev/null
  "$BIN/ms-data" plan --config "$SRC/configs/mix-shakespeare.yaml" --output data/shakespeare.plan \
    > /dev/null
fi

train() {  # train <run dir> [--set ...]
  local dir=$1
  shift
  [ -f "$dir/checkpoints/latest" ] && return 0
  mpirun -np 2 "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set run.dir="$dir" \
    --set train.steps="$STEPS" --set train.eval_every=0 --set checkpoint.every=0 "$@" \
    > "$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  grep -E "step $STEPS/$STEPS " "$dir.log" | tail -1 || true  # the final loss
}
t0=$(date +%s)
# shellcheck disable=SC2086  # TARGET holds several --set arguments
train "$WORK/target" $TARGET
t1=$(date +%s)
train "$WORK/draft" --set model.n_layers=1 --set model.d_model=64 --set model.n_heads=2 \
  --set model.n_kv_heads=2 --set model.d_ff=176
t2=$(date +%s)
echo "# trained the target in $((t1 - t0)) s and the draft in $((t2 - t1)) s"

# Prompts: 32 lines of the corpus's last 10% (speaker lines and verse), 48 new tokens each.
python3 - "$SRC/data/corpus/tinyshakespeare.txt" > prompts.jsonl <<'PY'
import json, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8")]
tail = [l for l in lines[int(len(lines) * 0.9):] if len(l) > 20][:32]
for i, l in enumerate(tail):
    print(json.dumps({"id": f"p{i}", "prompt": l + "\n", "max_tokens": 48}))
PY

gen() {  # gen <out> [args...]: greedy completions at batch 1, the speculative line kept
  local out=$1
  shift
  "$BIN/ms-infer" generate --checkpoint "$WORK/target/checkpoints" --prompts prompts.jsonl \
    --output "$out" --max-batch 1 --no-progress "$@" 2>&1 | grep "^speculative" || true
}
# Decode speed from the completions: output tokens over the makespan (every request arrives at
# the start, so the last one's latency is the whole run's), the fastest of 3 runs each, and
# equality with the target alone.
compare() {  # compare <alone prefix> <with-draft prefix>: files PREFIX.1.jsonl .. PREFIX.3.jsonl
  python3 - "$1" "$2" <<'PY'
import json, sys
def load(path):
    rows = [json.loads(l) for l in open(path)]
    assert rows and all("tokens" in r for r in rows), f"{path}: no tokens"
    return rows
def best(prefix):
    runs = [load(f"{prefix}.{i}.jsonl") for i in (1, 2, 3)]
    assert all([r["tokens"] for r in run] == [r["tokens"] for r in runs[0]] for run in runs)
    rate = lambda rows: sum(r["completion_tokens"] for r in rows) / (max(r["latency_ms"] for r in rows) / 1e3)
    return runs[0], max(rate(run) for run in runs)
(a, ra), (b, rb) = best(sys.argv[1]), best(sys.argv[2])
same = sum(x["tokens"] == y["tokens"] for x, y in zip(a, b))
print(f"greedy outputs token-for-token equal to the target alone: {same} of {len(a)}")
print(f"corpus prompts: {rb:.0f} output tokens/s with the draft vs {ra:.0f} alone ({rb / ra:.2f}x, "
      f"best of 3 runs each)")
PY
}
echo "## generate: 32 corpus lines, 48 tokens each, greedy, batch 1"
for r in 1 2 3; do gen "alone.$r.jsonl"; done
for k in 2 3 4; do
  echo "### k = $k"
  for r in 1 2 3; do
    gen "draft$k.$r.jsonl" --draft-model "$WORK/draft/checkpoints" --draft-tokens "$k" > "spec$k.txt"
  done
  cat "spec$k.txt"
  compare alone "draft$k"
done
echo "## bench: 16 random prompts of 32 tokens, 48 generated, greedy, batch 1"
for k in 2 3 4; do
  "$BIN/ms-infer" bench --checkpoint "$WORK/target/checkpoints" --draft-model "$WORK/draft/checkpoints" \
    --draft-tokens "$k" --num-prompts 16 --output-len 48 --max-batch 1 --batch-sizes 1 2>&1 |
    grep -E "^speculative" || true
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
