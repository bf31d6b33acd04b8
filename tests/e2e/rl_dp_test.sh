#!/usr/bin/env bash
# ms-train rl over data-parallel ranks (docs/rl.md, "Data parallelism"): the same run on one rank
# and under `mpirun -np 2` must generate the same rollouts (seeded by their position in the
# round, whichever rank generates them), keep and drop the same groups under dynamic sampling,
# and take the same updates, so rl_steps.jsonl and rl_eval.jsonl agree: counts and rewards
# exactly, losses, gradient norms, entropies, clip fractions and KLs to 1e-5 relative (and with
# VAPO's critic its value loss, gradient norm, values and returns). Also a
# prompts_per_step that the ranks cannot share, and asynchronous rollouts, are refused by name.
# Usage: rl_dp_test.sh <mpirun> <bin dir> <source dir> <make_tiny_model>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
MAKE=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$MAKE" --dir "$work/model" --tokenizer "$SRC/data/tokenizers/gpt2/tokenizer.json" \
  --d-model 16 --layers 1 --heads 2 --kv-heads 1 --d-ff 32 --max-seq-len 128 > /dev/null
bash "$SRC/data/corpus/make_arithmetic_prompts.sh" "$work/prompts" 20 2> /dev/null
# GRPO scores the share of vowels (varied in every group); DAPO the parity of the response's
# length, so some groups score all equal and dynamic sampling drops them.
cat > "$work/vowels.py" <<'PY'
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    print(sum(c in "aeiou" for c in q["response"]) / (1 + len(q["response"])))
PY
cat > "$work/parity.py" <<'PY'
import json, sys
for line in sys.stdin:
    print(len(json.loads(line)["response"]) % 2)
PY

config() {  # config <file> <run dir> <algorithm section> <reward program> [prompts_per_step]
  cat > "$1" <<YAML
run: {dir: $2, seed: 5}
actor: {model_dir: $work/model}
prompts: {train: $work/prompts/arithmetic_prompts_train.jsonl,
          eval: $work/prompts/arithmetic_prompts_heldout.jsonl, eval_limit: 7, eval_every: 2}
rollout: {group_size: 4, prompts_per_step: ${5:-4}, max_tokens: 8, temperature: 1.0}
algorithm: $3
train: {steps: 3, mini_batches: 2, epochs: 2}
optimizer: {lr: 0.01}
reward: {program: "python3 $4", timeout_s: 30}
YAML
}

compare() {  # compare <one-rank run dir> <two-rank run dir>
  python3 - "$1" "$2" <<'PY'
import json, sys
def rows(d, f):
    return [json.loads(l) for l in open(f"{d}/{f}")]
exact = ["step", "kept_groups", "dropped_groups", "rounds", "response_tokens", "updates"]
close = ["mean_reward", "accuracy", "response_length", "entropy", "clip_fraction",
         "dual_clip_fraction", "policy_kl", "ref_kl", "loss", "grad_norm"]
one, two = rows(sys.argv[1], "rl_steps.jsonl"), rows(sys.argv[2], "rl_steps.jsonl")
assert len(one) == len(two) == 3, (len(one), len(two))
critic = ["value_loss", "value_clip_fraction", "critic_grad_norm", "value_mean", "return_mean",
          "explained_variance"]
for a, b in zip(one, two):
    for k in exact + [k for k in ["critic_updates"] if k in a]:
        assert a[k] == b[k], (k, a, b)
    for k in close + [k for k in critic if k in a]:
        assert abs(a[k] - b[k]) <= 1e-5 * max(abs(a[k]), abs(b[k])) + 1e-9, (k, a[k], b[k])
assert one[-1]["grad_norm"] > 0 and one[-1]["clip_fraction"] > 0, one[-1]
ev1, ev2 = rows(sys.argv[1], "rl_eval.jsonl"), rows(sys.argv[2], "rl_eval.jsonl")
assert ev1 == ev2 and [e["step"] for e in ev1] == [0, 2, 3], (ev1, ev2)
print("dropped groups per step:", [r["dropped_groups"] for r in one])
PY
}

for algo in grpo dapo vapo; do
  case $algo in
    grpo) section="{name: grpo, kl_coef: 0.01}"; reward=$work/vowels.py ;;
    dapo) section="{name: dapo, max_rounds: 8}"; reward=$work/parity.py ;;
    vapo) section="{name: vapo}"; reward=$work/vowels.py ;;
  esac
  config "$work/$algo.1.yaml" "$work/$algo.1" "$section" "$reward"
  config "$work/$algo.2.yaml" "$work/$algo.2" "$section" "$reward"
  if [ $algo = vapo ]; then  # one value pretraining step; advantages whitened over both ranks
    for n in 1 2; do echo "critic: {warmup_steps: 1, lr: 0.02}" >> "$work/$algo.$n.yaml"; done
  fi
  "$BIN/ms-train" rl --config "$work/$algo.1.yaml" > "$work/$algo.1.log" 2>&1 ||
    { cat "$work/$algo.1.log"; fail "$algo on one rank"; }
  timeout -k 5 240 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/$algo.2.yaml" \
    > "$work/$algo.2.log" 2>&1 < /dev/null || { cat "$work/$algo.2.log"; fail "$algo on two ranks"; }
  grep -q "over 2 data-parallel rank(s)" "$work/$algo.2.log" || { cat "$work/$algo.2.log"; fail "not 2 ranks"; }
  compare "$work/$algo.1" "$work/$algo.2" || fail "$algo: two ranks differ from one"
  [ -s "$work/$algo.2/telemetry/rank-00001.jsonl" ] || fail "$algo: rank 1 wrote no telemetry"
  echo "ok: $algo, one rank = two ranks"
done
[ "$(python3 -c "import json; print(sum(json.loads(l)['dropped_groups'] for l in open('$work/dapo.1/rl_steps.jsonl')))")" -gt 0 ] ||
  fail "dapo dropped no group: dynamic sampling's split over ranks was not exercised"

config "$work/odd.yaml" "$work/odd" "{name: grpo}" "$work/vowels.py" 3
if timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/odd.yaml" \
  > "$work/odd.log" 2>&1 < /dev/null; then
  fail "3 prompts per step on 2 ranks should be refused"
fi
grep -q "rollout.prompts_per_step (3) must be a multiple of the data-parallel ranks (2)" "$work/odd.log" ||
  { cat "$work/odd.log"; fail "the refusal does not name the key"; }
# Asynchronous rollouts are one rank's for now: refused by name on two.
config "$work/async.yaml" "$work/async" "{name: grpo}" "$work/vowels.py"
sed -i "s/temperature: 1.0}/temperature: 1.0, async_staleness: 1}/" "$work/async.yaml"
if timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/async.yaml" \
  > "$work/async.log" 2>&1 < /dev/null; then
  fail "asynchronous rollouts on 2 ranks should be refused"
fi
grep -q "rollout.async_staleness runs on one rank for now, got 2" "$work/async.log" ||
  { cat "$work/async.log"; fail "the async refusal does not name the key"; }
echo "rl dp e2e: ok"
