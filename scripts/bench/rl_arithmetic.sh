#!/usr/bin/env bash
# RL post-training on the arithmetic task (docs/rl.md, docs/bench/rl.md). A small model is first
# trained by ms-train (one rank, one thread) on STORIES distinct arithmetic stories of OPS
# operations (make_arithmetic_corpus.sh's exact generator, seed 4242), with a BPE learned from
# those stories and configs/tiny-cpu.yaml's shape (4 layers of d_model 128, sequences of 128
# tokens). That checkpoint is then post-trained by `ms-train rl` with GRPO and, separately, with
# DAPO, on 4000 fresh problems of the same kind (another seed, none among the pretraining
# stories: RL_FRESH_PROMPTS) or, with RL_FRESH_PROMPTS=0, on the pretraining stories cut at the
# question. The script prints the held-out greedy exact-match accuracy before, every 10 steps and
# after each run: 500 prompts from another seed, with every prompt that occurs among the
# pretraining stories removed (make_arithmetic_prompts.sh), and none among the RL prompts. It
# also prints each run's mean reward and sample accuracy over each tenth of its steps. The stories' BPE makes every number a single token, so an answer
# sentence (" Olga has 41 pears.") is about 5 tokens; rollouts get up to 20.
# Usage: rl_arithmetic.sh <bin dir> [work dir, default a new /tmp dir] [pretrain steps, 380]
#          [rl steps, 240] [held-out seed, 20261206] [rl lr, 1.0e-5] [stories, 20000]
#          [ops, 1-1] [start, 10-29]
# The work dir keeps the data and the pretrained checkpoint: a rerun with the same work dir
# (and the same pretraining arguments) only redoes the RL runs.
set -euo pipefail
BIN=${1:?usage: rl_arithmetic.sh <bin dir> [work dir] [pretrain steps] [rl steps] [held-out seed] [rl lr] [stories] [ops] [start]}
BIN=$(cd "$BIN" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${2:-$(mktemp -d /tmp/ms_rl_arith_XXXXXX)}
# 380 pretraining steps leave a base that answers a quarter of the held-out prompts: the model
# is partway to binding the story's numbers, which is where RL has the most to add. The base's
# accuracy is not monotonic in this count (350: 17%, 380: 25%, 400: 5%, 450: 87%, 500: 63%,
# 600: 85%; the cosine schedule ends at each count), so another count is another experiment
# (docs/bench/rl.md, "Bases and fresh prompts").
STEPS=${3:-380}
RL_STEPS=${4:-240}
HELDOUT_SEED=${5:-20261206}
# 1e-5, not 1e-4: with 16 prompts x 8 responses per step the GRPO gradient is mostly noise, and
# Adam turns it into a step of ~lr on every weight. At 1e-4 such steps shift the whole number
# readout by +-1 and held-out accuracy falls (random rewards, which carry no signal, do the same
# damage); at 1e-5 it rises (docs/bench/rl.md, "Diagnosis").
RL_LR=${6:-1.0e-5}
STORIES=${7:-20000}
OPS=${8:-1-1}
START=${9:-10-29}
TRAIN_SEED=4242
# Rollout and update shape, the same for GRPO and DAPO (overridable for experiments).
G=${RL_G:-8}
PPS=${RL_PROMPTS_PER_STEP:-16}
TEMP=${RL_TEMPERATURE:-0.7}
MB=${RL_MINI_BATCHES:-2}
# RL_RUNS="grpo" runs one algorithm only (experiments); the benchmark runs grpo, dapo,
# grpo_spec (speculative rollouts) and grpo_async (asynchronous rollouts, staleness 1); ppo
# and vapo (with a value model) run when named, with RL_CRITIC_WARMUP value pretraining steps
# (10: VAPO's 50 would be most of a 60-step run) and the critic at RL_CRITIC_LR (default twice
# the actor's lr, VAPO's ratio). grpo_dp2 and grpo_tp2 run grpo under `mpirun -np 2`: two
# data-parallel ranks, and the actor at tensor parallel 2 generating at tp 1 on both ranks
# (the hybrid engine's in-memory reshard; its bytes and time are printed); grpo_split runs
# that tp 2 actor on 2 ranks with a third generating only (split placement, 3 ranks).
# grpo_split1 and grpo_split1_async run one trainer and one rollout-only rank (2 ranks),
# synchronous and with staleness 1: the rollout rank generates step i + 1 while the trainer
# updates step i, so their wall-clock for the same updates is the asynchronous gain.
# RL_TRAIN_LIMIT=N trains on the first N training prompts only (0: all). With a few prompts the
# run is a check that the loop learns at all: they are revisited every step, so the sample
# accuracy on them should climb (docs/bench/rl.md).
LIMIT=${RL_TRAIN_LIMIT:-0}
# RL_FRESH_PROMPTS=N (default 4000, one pass at 240 steps of 16) trains on N prompts of another
# seed (RL_FRESH_SEED, default 31337): problems the model has not seen, from the distribution the
# held-out prompts come from (and none of them). 0 trains on the pretraining stories cut at the
# question, which the model has learnt by rote and which teach the held-out prompts less.
FRESH=${RL_FRESH_PROMPTS:-4000}
FRESH_SEED=${RL_FRESH_SEED:-31337}
if [ "$FRESH" -gt 0 ] && [ "$FRESH_SEED" = "$HELDOUT_SEED" ]; then
  echo "rl_arithmetic.sh: RL_FRESH_SEED must differ from the held-out seed ($HELDOUT_SEED)" >&2
  exit 2
fi
# RL_SEED: the RL runs' run.seed (rollout sampling and prompt order), 1 unless set.
RL_SEED=${RL_SEED:-1}
CRITIC_WARMUP=${RL_CRITIC_WARMUP:-10}
CRITIC_LR=${RL_CRITIC_LR:-$(python3 -c "print(2 * $RL_LR)")}
mkdir -p "$WORK/data"
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

echo "# rl_arithmetic.sh: $(uname -n), $(nproc --all) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)," \
  "pretrain $STEPS steps on $STORIES stories of $OPS operations from $START, RL $RL_STEPS steps at lr $RL_LR" \
  "(G $G, $PPS prompts/step, temperature $TEMP, $MB mini-batches, seed $RL_SEED), held-out seed $HELDOUT_SEED" \
  "${RL_RUNS:+, runs $RL_RUNS}, critic lr $CRITIC_LR with $CRITIC_WARMUP value pretraining steps"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
tag="$STORIES-$TRAIN_SEED-$OPS-$START-$STEPS"
if [ "$(cat data/tag 2>/dev/null)" != "$tag" ]; then
  rm -rf data pretrain pretrain.log && mkdir -p data
  bash "$SRC/data/corpus/make_arithmetic_corpus.sh" "$STORIES" "$TRAIN_SEED" text exact "$OPS" \
    "$START" > data/stories.jsonl
  # A BPE learned from the stories themselves: every word and every number up to 108 becomes
  # one token (the vocabulary stops at 530 of the 1024 asked for), so a story is ~25 tokens
  # and an answer is one token. The demo's Shakespeare BPE splits numbers into digits and
  # stories into ~53 tokens; with it the model had not learned to use the first sentence's
  # number after 600 steps (docs/bench/rl.md).
  "$BIN/ms-data" tokenizer train --input data/stories.jsonl --vocab-size 1024 \
    --output data/tokenizer.json > /dev/null 2>&1
  "$BIN/ms-data" build --input data/stories.jsonl \
    --tokenizer data/tokenizer.json --output data/arithmetic --threads 1 --no-progress > /dev/null
  cat > data/mix.yaml <<YAML
seq_len: 128
seed: 1234
total_samples: $((STEPS * 16))
validation: {fraction: 0.02, samples: 64}
sources:
  - {name: arithmetic, prefix: $WORK/data/arithmetic, weight: 1.0}
YAML
  "$BIN/ms-data" plan --config data/mix.yaml --output data/arithmetic.plan > /dev/null
  echo "$tag" > data/tag
fi
# The held-out file drops every prompt that occurs among the pretraining stories (which, cut at
# the question, are the RL prompts when RL_FRESH_PROMPTS=0).
bash "$SRC/data/corpus/make_arithmetic_prompts.sh" data/prompts 500 "$HELDOUT_SEED" \
  "$STORIES" "$TRAIN_SEED" exact "$OPS" "$START"

train_prompts=data/prompts/arithmetic_prompts_train.jsonl
if [ "$FRESH" -gt 0 ]; then
  # Fresh RL prompts: FRESH problems from a third seed that occur neither among the pretraining
  # stories nor among the held-out prompts, as a recipe's RL prompt set is kept apart from its
  # SFT data (make_arithmetic_prompts.sh's held-out file of that seed, excluding the held-out
  # prompts).
  bash "$SRC/data/corpus/make_arithmetic_prompts.sh" data/fresh "$FRESH" "$FRESH_SEED" \
    "$STORIES" "$TRAIN_SEED" exact "$OPS" "$START" data/prompts/arithmetic_prompts_heldout.jsonl \
    2> data/fresh_split.log || { cat data/fresh_split.log >&2; exit 1; }
  mv data/fresh/arithmetic_prompts_heldout.jsonl data/prompts/fresh_$FRESH.jsonl
  train_prompts=data/prompts/fresh_$FRESH.jsonl
  echo "# RL trains on $FRESH fresh prompts (seed $FRESH_SEED), none among the pretraining stories or held-out prompts"
fi
if [ "$LIMIT" -gt 0 ]; then
  head -n "$LIMIT" "$train_prompts" > data/prompts/train_first_$LIMIT.jsonl
  train_prompts=data/prompts/train_first_$LIMIT.jsonl
  echo "# RL trains on the first $LIMIT training prompts only"
fi

t0=$(date +%s)
if [ ! -f pretrain/checkpoints/latest ]; then
  vocab=$(python3 -c 'import json; print(json.load(open("data/arithmetic.meta.json"))["tokenizer"]["vocab_size"])')
  # One rank, one thread. The spike guard is off: the loss of these stories falls fast and then
  # sits still, the guard's window deviation shrinks to nothing, and with it on nearly every
  # update after step ~140 was skipped as a "spike" (458 of 600 in the first try).
  "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set run.dir=pretrain \
    --set parallel.dp=1 --set model.vocab_size="$vocab" --set data.plan=data/arithmetic.plan \
    --set train.steps="$STEPS" --set train.eval_every=0 --set checkpoint.every=0 \
    --set optim.spike_guard.enabled=false > pretrain.log 2>&1 || { tail -20 pretrain.log; exit 1; }
  echo "# pretrained in $(($(date +%s) - t0)) s"
fi
grep -E "step $STEPS/$STEPS " pretrain.log | tail -1 | sed 's/^.*] //' || true

rl() {  # rl <name> <algorithm section> [more rollout keys, ", key: value"] [more yaml] [ranks]
  cat > "$1.yaml" <<YAML
run: {dir: $1, seed: $RL_SEED}
actor: {checkpoint: pretrain/checkpoints}
prompts: {train: $train_prompts,
          eval: data/prompts/arithmetic_prompts_heldout.jsonl, eval_every: 10}
rollout: {group_size: $G, prompts_per_step: $PPS, max_tokens: 20, temperature: $TEMP, stop: ["."]${3:-}}
algorithm: $2
train: {steps: $RL_STEPS, mini_batches: $MB, epochs: 1}
optimizer: {lr: $RL_LR, grad_clip: 1.0}
reward: {builtin: exact_number}
${4:-}
YAML
  rm -rf "$1"
  local t=$(date +%s)
  if [ "${5:-1}" -gt 1 ]; then
    mpirun --oversubscribe -np "$5" "$BIN/ms-train" rl --config "$1.yaml" > "$1.log" 2>&1 < /dev/null ||
      { tail -3 "$1.log"; return 1; }
  else
    "$BIN/ms-train" rl --config "$1.yaml" > "$1.log" 2>&1 || { tail -3 "$1.log"; return 1; }
  fi
  echo "## $1: $(($(date +%s) - t)) s"
  python3 - "$1" "$G" <<'PY'
import json, sys
run = sys.argv[1]
evals = [json.loads(l) for l in open(f"{run}/rl_eval.jsonl")]
steps = [json.loads(l) for l in open(f"{run}/rl_steps.jsonl")]
print("held-out accuracy by step: " +
      ", ".join(f"{e['step']}: {100 * e['heldout_accuracy']:.1f}%" for e in evals) +
      f" ({evals[0]['prompts']} prompts)")
print(f"before {100 * evals[0]['heldout_accuracy']:.1f}%, after {100 * evals[-1]['heldout_accuracy']:.1f}%")
tenth = max(1, len(steps) // 10)
for i in range(0, len(steps), tenth):  # sample accuracy averaged over each tenth of the run
    chunk = steps[i:i + tenth]
    mean = lambda k: sum(s[k] for s in chunk) / len(chunk)
    print(f"  steps {chunk[0]['step']:3d}-{chunk[-1]['step']:3d}: sample reward {mean('mean_reward'):.3f} "
          f"accuracy {mean('accuracy'):.3f} length {mean('response_length'):.1f} "
          f"kept {mean('kept_groups'):.1f} dropped {mean('dropped_groups'):.1f} "
          f"clip {mean('clip_fraction'):.3f} rollout {mean('rollout_s'):.2f}s update {mean('update_s'):.2f}s"
          + (f" value loss {mean('value_loss'):.4f} value {mean('value_mean'):.3f}"
             if all("value_loss" in s for s in chunk) else ""))
# Generation speed: tokens generated over the rollout phases' time (generation, rewards and
# the behavior log-probs), and the drafting figures of speculative rollouts.
group_size = int(sys.argv[2])
generated = sum(s["response_length"] * (s["kept_groups"] + s["dropped_groups"]) * group_size
                for s in steps)
rollout_s = sum(s["rollout_s"] for s in steps)
print(f"rollouts: {generated / rollout_s:.0f} tokens/s ({rollout_s:.1f} s over {len(steps)} "
      f"steps); tokens per actor forward "
      f"{sum(s['tokens_per_forward'] for s in steps) / len(steps):.2f}, draft acceptance "
      f"{sum(s['draft_acceptance'] for s in steps) / len(steps):.2f}; update "
      f"{sum(s['update_s'] for s in steps):.1f} s; weight versions {steps[0]['weight_version']}.."
      f"{steps[-1]['weight_version']}")
if "rollout_wait_s" in steps[0]:
    print(f"trainer waited for rollouts: {sum(s['rollout_wait_s'] for s in steps):.1f} s over "
          f"{len(steps)} steps")
if "reshard_bytes" in steps[0]:
    print(f"in-memory reshard: {max(s['reshard_bytes'] for s in steps) / 1e6:.2f} MB received by "
          f"the busiest rank per step, {sum(s['reshard_s'] for s in steps) / len(steps) * 1e3:.1f} ms "
          f"per step on average")
PY
}
# A run that stops (DAPO's dynamic sampling at its bound when correct answers are too rare) is
# reported and the script goes on.
for run in ${RL_RUNS:-grpo dapo grpo_spec grpo_async}; do
  case $run in
    grpo) rl grpo "{name: grpo}" || echo "## grpo stopped (its log's tail above)" ;;
    dapo) rl dapo "{name: dapo, max_rounds: 16}" || echo "## dapo stopped (its log's tail above)" ;;
    # GRPO with speculative rollouts (4 drafted tokens per round), and with asynchronous
    # rollouts one step stale: the same number of updates as grpo, for the timings.
    grpo_spec) rl grpo_spec "{name: grpo}" ", speculative_tokens: 4" || echo "## grpo_spec stopped" ;;
    grpo_async) rl grpo_async "{name: grpo}" ", async_staleness: 1" || echo "## grpo_async stopped" ;;
    grpo_dp2) rl grpo_dp2 "{name: grpo}" "" "" 2 || echo "## grpo_dp2 stopped" ;;
    grpo_tp2) rl grpo_tp2 "{name: grpo}" "" "parallel: {tp: 2}" 2 || echo "## grpo_tp2 stopped" ;;
    grpo_split) rl grpo_split "{name: grpo}" "" "$(printf 'parallel: {tp: 2}\nplacement: {mode: split, rollout_ranks: 1}')" 3 ||
                echo "## grpo_split stopped" ;;
    grpo_split1|grpo_split1_async)
      keys=""
      [ $run = grpo_split1_async ] && keys=", async_staleness: 1"
      rl $run "{name: grpo}" "$keys" "placement: {mode: split, rollout_ranks: 1}" 2 ||
        echo "## $run stopped" ;;
    ppo|vapo) rl $run "{name: $run}" "" "critic: {warmup_steps: $CRITIC_WARMUP, lr: $CRITIC_LR}" ||
              echo "## $run stopped" ;;
  esac
done
echo "# done $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
