#!/usr/bin/env bash
# The main job on bundled data, end to end:
#   datasets from the bundled corpora -> a weighted mixture plan -> training on 2 ranks with
#   telemetry and traces -> diagnosis (health check, straggler what-if on the run's trace,
#   fault detection on simulated telemetry).
# Checkpoint, reshard and generation join this chain as those tools land.
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
ls "$RUN" "$RUN/telemetry" "$RUN/trace"

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
