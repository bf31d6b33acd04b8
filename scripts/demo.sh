#!/usr/bin/env bash
# The main job on bundled data, end to end:
#   a byte-level BPE tokenizer learned from Tiny Shakespeare (GPT-2's Hugging Face
#   tokenizer.json shown loading unchanged) -> datasets from the bundled corpora -> a weighted
#   mixture plan -> training on 2 ranks with telemetry, traces and checkpoints, its loss printed
#   next to the data's unigram entropy -> the same losses with a dedicated data-loader rank ->
#   the same losses with tensor parallelism (tp=2) and with pipeline parallelism (pp=2,
#   zero-bubble) -> reshard the checkpoint offline to
#   tp=2 x dp=2 -> export to
#   Hugging Face safetensors -> generate text that reads like the corpus -> a MoE model served
#   with attention and experts on separate ranks -> diagnosis (health check, straggler what-if
#   on the run's trace, fault detection on simulated telemetry).
# Environment: BUILD_DIR (default build/release), JOBS, DEMO_STEPS (default 400: about 2 minutes
# of training on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

BUILD_DIR=${BUILD_DIR:-build/release}
JOBS=${JOBS:-$(nproc)}
STEPS=${DEMO_STEPS:-400}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMS_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
BIN="$BUILD_DIR/bin"

# OpenMPI refuses root without these; ranks on a small machine must yield and share cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe -np 2)
GPT2=data/tokenizers/gpt2/tokenizer.json
TOKENIZER=data/shakespeare.tokenizer.json
RUN=runs/demo

step() { printf '\n== %s\n' "$*"; }

step "toolkit version"
"$BIN/ms-train" --version

step "ranks, hosts, devices and clock offsets (2 ranks)"
"${MPIRUN[@]}" "$BIN/ms-diagnose" info

step "tokenizers: GPT-2's Hugging Face tokenizer.json, and a 1024-token BPE learned from the corpus"
ids=$("$BIN/ms-data" tokenizer encode --tokenizer "$GPT2" --text "Hello world")
echo "GPT-2 encodes 'Hello world' as $ids (Hugging Face's GPT-2 tokenizer: [15496,995])"
[ "$ids" = "[15496,995]" ] || { echo "GPT-2 ids differ from Hugging Face's" >&2; exit 1; }
# A vocabulary fitted to the corpus: 1024 ids instead of 50257 keep the embedding small, so the
# tiny model spends its parameters and FLOPs on the transformer and learns within minutes.
"$BIN/ms-data" tokenizer train --input data/corpus/tinyshakespeare.txt --vocab-size 1024 \
  --output "$TOKENIZER"
"$BIN/ms-data" tokenizer encode --tokenizer "$TOKENIZER" --text "ROMEO: Wherefore art thou?"

step "datasets: Tiny Shakespeare (one document per speech) and arithmetic word problems"
# Speeches are stored without an end-of-document token, so a sample reads like the play, one
# speaker after another, and generation goes on to the next speaker instead of stopping.
"$BIN/ms-data" build --input data/corpus/tinyshakespeare.txt --doc-separator blank-line \
  --no-append-eos --tokenizer "$TOKENIZER" --output data/shakespeare --no-progress --replace
"$BIN/ms-data" build --input data/corpus/arithmetic.jsonl.zst \
  --tokenizer "$TOKENIZER" --output data/arithmetic --no-progress --replace
"$BIN/ms-data" verify data/shakespeare
"$BIN/ms-data" inspect data/arithmetic
entropy() { "$BIN/ms-data" inspect "$1" --entropy | sed -n 's/^unigram *entropy \([0-9.]*\) nats.*/\1/p'; }
H_SHAKESPEARE=$(entropy data/shakespeare)
H_ARITHMETIC=$(entropy data/arithmetic)
echo "unigram entropy (the loss of a model that ignores context): shakespeare $H_SHAKESPEARE," \
  "arithmetic $H_ARITHMETIC nats/token"

step "a weighted mixture plan with a held-out validation split"
"$BIN/ms-data" plan --config configs/mix-shakespeare.yaml --output data/shakespeare.plan --replace
"$BIN/ms-data" dump-plan data/shakespeare.plan --samples 0:2 --format text

step "training the tiny model on 2 data-parallel ranks (ZeRO-1), $STEPS steps"
rm -rf "$RUN"
"${MPIRUN[@]}" "$BIN/ms-train" --config configs/tiny-cpu.yaml \
  --set run.dir="$RUN" --set train.steps="$STEPS"
ls "$RUN" "$RUN/telemetry" "$RUN/trace" "$RUN/checkpoints"
echo "loss (nats/token) against the unigram entropy of the data (shakespeare $H_SHAKESPEARE," \
  "arithmetic $H_ARITHMETIC; the blend is 90/10, then 80/20):"
awk -v h="$H_SHAKESPEARE" '
  / step [0-9]+\/[0-9]+ \| loss / { split($0, a, "step "); split(a[2], b, " "); s = b[1];
                                     split($0, c, "loss "); split(c[2], d, " "); train[s] = d[1]; order[++n] = s }
  / eval step / { split($0, a, "eval step "); split(a[2], b, " "); split($0, c, "val_loss "); val[b[1]] = c[2] }
  END { printf "  %-9s %10s %10s %18s\n", "step", "train", "val", "train - unigram";
        for (i = 1; i <= n; ++i) { s = order[i]; split(s, t, "/");
          printf "  %-9s %10.3f %10s %+18.3f\n", s, train[s], (t[1] in val) ? sprintf("%.3f", val[t[1]]) : "", train[s] - h } }
' "$RUN/log.txt"

step "a dedicated data-loader rank: 10 steps on 3 ranks, 2 of them training (parallel.loaders=1), against 2 ranks loading locally"
rm -rf runs/demo-local runs/demo-loader
short=(--config configs/tiny-cpu.yaml --set train.steps=10 --set train.eval_every=0
       --set checkpoint.every=0 --set train.log_every=5)
"${MPIRUN[@]}" "$BIN/ms-train" "${short[@]}" --set run.dir=runs/demo-local
mpirun --oversubscribe -np 3 "$BIN/ms-train" "${short[@]}" --set run.dir=runs/demo-loader \
  --set parallel.loaders=1
step_losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/telemetry/rank-00000.jsonl"; }
if diff <(step_losses runs/demo-local) <(step_losses runs/demo-loader) > /dev/null; then
  echo "the 10 losses are bitwise the same with the loader rank"
else
  echo "the losses differ with the loader rank"; exit 1
fi

step "tensor parallelism: the same 10 steps with tp=2 (sequence parallel) on 2 ranks"
rm -rf runs/demo-tp
"${MPIRUN[@]}" "$BIN/ms-train" "${short[@]}" --set run.dir=runs/demo-tp --set parallel.tp=2
grep -o 'memory per model rank.*' runs/demo-tp/log.txt | sed 's/; expected.*//'
grep -o 'tensor-parallel communication: .*' runs/demo-tp/log.txt
paste <(step_losses runs/demo-local | sed 's/.*"loss"://') \
      <(step_losses runs/demo-tp | sed 's/.*"loss"://') |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (d > 1e-5 * $1) bad = 1 }
       END { printf "largest loss difference tp=2 vs dp=2 over 10 steps: %.2e\n", m; exit bad }' ||
  { echo "tp=2 losses differ from dp=2 beyond 1e-5"; exit 1; }

step "pipeline parallelism: the same 10 steps in 2 stages (zero-bubble schedule) on 2 ranks"
rm -rf runs/demo-pp
"${MPIRUN[@]}" "$BIN/ms-train" "${short[@]}" --set run.dir=runs/demo-pp --set parallel.pp=2 \
  --set parallel.schedule=zero-bubble
grep -o 'pipeline: pp .*' runs/demo-pp/log.txt
grep -o 'pipeline point-to-point: .*' runs/demo-pp/log.txt
paste <(step_losses runs/demo-local | sed 's/.*"loss"://') \
      <(step_losses runs/demo-pp | sed 's/.*"loss"://') |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (d > 1e-5 * $1) bad = 1 }
       END { printf "largest loss difference pp=2 vs dp=2 over 10 steps: %.2e\n", m; exit bad }' ||
  { echo "pp=2 losses differ from dp=2 beyond 1e-5"; exit 1; }

step "self-healing: the same 10 steps under ms-diagnose supervise, with rank 1 killed at step 6"
rm -rf runs/demo-supervised
"$BIN/ms-diagnose" supervise --ranks 2 --quiet -- mpirun --oversubscribe -np '{np}' \
  "$BIN/ms-train" "${short[@]}" --set run.dir=runs/demo-supervised --set checkpoint.every=2 \
  --set debug.kill_rank=1 --set debug.kill_step=6 2>&1 | grep -E "supervise: (crash|removing|completed|fault)"
final_losses() {  # the last record of every step (a restarted run's come later)
  step_losses "$1" | sed 's/"step":\([0-9]*\),"loss":/\1 /' | awk '{ l[$1] = $2 } END { for (s in l) print s, l[s] }' | sort -n
}
paste <(final_losses runs/demo-local) <(final_losses runs/demo-supervised) |
  awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d; if (d > 1e-5 * $2 || $1 != $3) bad = 1 }
       END { printf "largest loss difference of the recovered run vs the uninterrupted one: %.2e over %d steps\n", m, NR; exit bad || NR != 10 }' ||
  { echo "the supervised run's losses differ from the uninterrupted run's"; exit 1; }

step "the checkpoint: inspect, verify, reshard offline to tp=2 x dp=2 (ZeRO-1), compare, export"
"$BIN/ms-ckpt" list "$RUN/checkpoints"
"$BIN/ms-ckpt" inspect "$RUN/checkpoints" > "$RUN/inspect.txt"
head -20 "$RUN/inspect.txt"   # (a pipe into head would end inspect with SIGPIPE under pipefail)
"$BIN/ms-ckpt" verify "$RUN/checkpoints"
rm -rf runs/demo-resharded runs/demo-hf
"${MPIRUN[@]}" "$BIN/ms-ckpt" reshard "$RUN/checkpoints" --to tp=2,dp=2,zero=1 \
  --output runs/demo-resharded
"$BIN/ms-ckpt" diff "$RUN/checkpoints" runs/demo-resharded
"$BIN/ms-ckpt" export "$RUN/checkpoints" --format safetensors --output runs/demo-hf
ls runs/demo-hf

step "generate from the trained model (greedy, then sampled)"
printf '%s\n' '{"id":"greedy","prompt":"ROMEO:\n","max_tokens":80}' \
  '{"id":"sampled","prompt":"KING HENRY:\n","max_tokens":80,"temperature":0.8,"top_p":0.95,"seed":7}' \
  > runs/demo-prompts.jsonl
"$BIN/ms-infer" generate --model runs/demo-hf --prompts runs/demo-prompts.jsonl \
  --output runs/demo-generations.jsonl --no-progress
show_text() {  # <completions.jsonl> <tokenizer.json>: each prompt and its completion as text
  while IFS= read -r line; do
    id=$(printf '%s' "$line" | sed 's/.*"id":"\([^"]*\)".*/\1/')
    tokens=$(printf '%s' "$line" | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/')
    printf -- '--- %s\n%s' "$id" "$(grep "\"id\":\"$id\"" runs/demo-prompts.jsonl \
      | sed 's/.*"prompt":"\([^"]*\)".*/\1/; s/\\n$//')"
    echo
    "$BIN/ms-data" tokenizer decode --tokenizer "$2" --ids "[$tokens]"
  done < "$1"
}
show_text runs/demo-generations.jsonl runs/demo-hf/tokenizer.json

step "quantize to int8 and int4 (served with int8 activations) and compare with f32"
rm -rf runs/demo-int8 runs/demo-int4
"$BIN/ms-infer" quantize --model runs/demo-hf -o runs/demo-int8 --weights int8
"$BIN/ms-infer" quantize --model runs/demo-hf -o runs/demo-int4 --weights int4 --group-size 32
greedy_tokens() { grep '"id":"greedy"' "$1" | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/' | tr , '\n'; }
for q in int8 int4; do
  "$BIN/ms-infer" generate --model runs/demo-$q --prompts runs/demo-prompts.jsonl \
    --output runs/demo-$q.jsonl --no-progress
  same=$(paste <(greedy_tokens runs/demo-generations.jsonl) <(greedy_tokens runs/demo-$q.jsonl) |
    awk '$1 == $2 { n++; next } { exit } END { print n + 0 }')
  echo "$q: the greedy completion's first $same of $(greedy_tokens runs/demo-generations.jsonl |
    wc -l) tokens equal f32's"
done
# Perplexity over the first 32 windows of the training text (seen in training: a comparison of
# formats, not a held-out score; scripts/bench/infer_quant_ppl.sh holds text out).
for m in runs/demo-hf runs/demo-int8 runs/demo-int4; do
  "$BIN/ms-infer" eval-ppl --model "$m" --dataset data/shakespeare --samples 32
done

step "a mixture-of-experts model: 20 steps on 2 ranks, served with attention and experts on separate ranks"
rm -rf runs/demo-moe
"${MPIRUN[@]}" "$BIN/ms-train" --config configs/tiny-moe.yaml --set run.dir=runs/demo-moe \
  --set data.plan=data/shakespeare.plan --set model.vocab_size=1024 \
  --set train.steps=20 --set train.eval_every=0 --set checkpoint.every=20
# 1 attention rank (KV cache, engine) and 2 expert ranks (2 of the 4 experts each), micro-batches
# ping-ponging between them; the tokens must equal one process serving the whole model.
mpirun --oversubscribe -np 3 "$BIN/ms-infer" generate --checkpoint runs/demo-moe/checkpoints \
  --prompts runs/demo-prompts.jsonl --output runs/demo-moe-disaggregated.jsonl \
  --attention-ranks 1 --micro-batches 2 --no-progress
"$BIN/ms-infer" generate --checkpoint runs/demo-moe/checkpoints --prompts runs/demo-prompts.jsonl \
  --output runs/demo-moe-one-process.jsonl --no-progress
# (20 steps teach this model little: the point here is the serving layout, not its text.)
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
