#!/usr/bin/env bash
# The main job on bundled data, end to end:
#   datasets from the bundled corpora -> a weighted mixture plan -> training on 2 ranks with
#   telemetry, traces and checkpoints -> reshard the checkpoint offline to 4 ranks -> export to
#   Hugging Face safetensors -> generate text -> a MoE model served with attention and experts
#   on separate ranks -> diagnosis (health check, straggler what-if on the run's trace, fault
#   detection on simulated telemetry).
# Environment: BUILD_DIR (default build/release), JOBS, DEMO_STEPS (default 40).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

BUILD_DIR=${BUILD_DIR:-build/release}
JOBS=${JOBS:-$(nproc)}
STEPS=${DEMO_STEPS:-40}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMS_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
BIN="$BUILD_DIR/bin"

# OpenMPI refuses root without these; ranks on a small machine must yield and share cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe -np 2)
TOKENIZER=data/tokenizers/gpt2/tokenizer.json
RUN=runs/demo

step() { printf '\n== %s\n' "$*"; }

step "toolkit version"
"$BIN/ms-train" --version

step "ranks, hosts, devices and clock offsets (2 ranks)"
"${MPIRUN[@]}" "$BIN/ms-diagnose" info

step "datasets: Tiny Shakespeare (one document per scene) and arithmetic word problems"
"$BIN/ms-data" build --input data/corpus/tinyshakespeare.txt --doc-separator blank-line \
  --tokenizer "$TOKENIZER" --output data/shakespeare --no-progress
"$BIN/ms-data" build --input data/corpus/arithmetic.jsonl.zst \
  --tokenizer "$TOKENIZER" --output data/arithmetic --no-progress
"$BIN/ms-data" verify data/shakespeare
"$BIN/ms-data" inspect data/arithmetic

step "a weighted mixture plan with a held-out validation split"
"$BIN/ms-data" plan --config configs/mix-shakespeare.yaml --output data/shakespeare.plan
"$BIN/ms-data" dump-plan data/shakespeare.plan --samples 0:2 --format text

step "training the tiny model on 2 data-parallel ranks (ZeRO-1), $STEPS steps"
rm -rf "$RUN"
"${MPIRUN[@]}" "$BIN/ms-train" --config configs/tiny-cpu.yaml \
  --set run.dir="$RUN" --set train.steps="$STEPS" --set train.eval_every=20
ls "$RUN" "$RUN/telemetry" "$RUN/trace" "$RUN/checkpoints"

step "the checkpoint: inspect, verify, reshard offline to dp=4, compare, export"
"$BIN/ms-ckpt" list "$RUN/checkpoints"
"$BIN/ms-ckpt" inspect "$RUN/checkpoints" > "$RUN/inspect.txt"
head -20 "$RUN/inspect.txt"   # (a pipe into head would end inspect with SIGPIPE under pipefail)
"$BIN/ms-ckpt" verify "$RUN/checkpoints"
rm -rf runs/demo-resharded runs/demo-hf
"${MPIRUN[@]}" "$BIN/ms-ckpt" reshard "$RUN/checkpoints" --to dp=4,zero=1 \
  --output runs/demo-resharded
"$BIN/ms-ckpt" diff "$RUN/checkpoints" runs/demo-resharded
"$BIN/ms-ckpt" export "$RUN/checkpoints" --format safetensors --output runs/demo-hf
ls runs/demo-hf

step "generate from the trained model (greedy, then sampled)"
printf '%s\n' '{"id":"greedy","prompt":"ROMEO:","max_tokens":24}' \
  '{"id":"sampled","prompt":"KING HENRY:","max_tokens":24,"temperature":0.8,"top_p":0.95,"seed":7}' \
  > runs/demo-prompts.jsonl
"$BIN/ms-infer" generate --model runs/demo-hf --prompts runs/demo-prompts.jsonl \
  --output runs/demo-generations.jsonl --no-progress
cat runs/demo-generations.jsonl

step "a mixture-of-experts model: 20 steps on 2 ranks, served with attention and experts on separate ranks"
rm -rf runs/demo-moe
"${MPIRUN[@]}" "$BIN/ms-train" --config configs/tiny-moe.yaml --set run.dir=runs/demo-moe \
  --set data.plan=data/shakespeare.plan --set train.seq_len=64 --set model.max_seq_len=64 \
  --set train.steps=20 --set train.eval_every=0 --set checkpoint.every=20
# 1 attention rank (KV cache, engine) and 2 expert ranks (2 of the 4 experts each), micro-batches
# ping-ponging between them; the tokens must equal one process serving the whole model.
mpirun --oversubscribe -np 3 "$BIN/ms-infer" generate --checkpoint runs/demo-moe/checkpoints \
  --prompts runs/demo-prompts.jsonl --output runs/demo-moe-disaggregated.jsonl \
  --attention-ranks 1 --micro-batches 2 --no-progress
"$BIN/ms-infer" generate --checkpoint runs/demo-moe/checkpoints --prompts runs/demo-prompts.jsonl \
  --output runs/demo-moe-one-process.jsonl --no-progress
cat runs/demo-moe-disaggregated.jsonl
tokens() { grep -o '"tokens":\[[^]]*\]' "$1"; }
if [ "$(tokens runs/demo-moe-disaggregated.jsonl)" = "$(tokens runs/demo-moe-one-process.jsonl)" ]; then
  echo "disaggregated serving produced the same tokens as one process"
else
  echo "disaggregated tokens differ from one process" >&2
  exit 1
fi

step "health check of the 2 ranks (small sweep)"
"${MPIRUN[@]}" "$BIN/ms-diagnose" check --max-bytes 262144 --iters 5 \
  --min-degradation 0.6 || echo "(check flagged a rank: on shared cores this is noise)"

step "straggler what-if analysis of the training run's trace"
"$BIN/ms-diagnose" stragglers "$RUN" --svg "$RUN/stragglers.svg" \
  || echo "(exit 3: slowdown above the reporting threshold)"

step "fault detection: a simulated 8-machine job with a degrading NIC on machine 5"
rm -rf runs/simulated
"$BIN/ms-diagnose" simulate --out runs/simulated --machines 8 --duration-s 1200 \
  --fault nic-degrade --fault-machine 5 --fault-start-s 400 --seed 7
"$BIN/ms-diagnose" detect runs/simulated \
  || [ $? -eq 3 ] && echo "(exit 3: a faulty machine was found, as injected)"

step "demo finished"
