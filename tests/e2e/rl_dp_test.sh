#!/usr/bin/env bash
# ms-train rl over data-parallel ranks (docs/rl.md, "Data parallelism"): the same run on one rank
# and under `mpirun -np 2` must generate the same rollouts (seeded by their position in the
# round, whichever rank generates them), keep and drop the same groups under dynamic sampling,
# and take the same updates, so rl_steps.jsonl and rl_eval.jsonl agree: counts and rewards
# exactly, losses, gradient norms, entropies, clip fractions and KLs to 1e-5 relative (and with
# VAPO's critic its value loss, gradient norm, values and returns). The same holds for a
# tensor-parallel actor (parallel.tp 2 on 2 ranks, VAPO's critic at tp 2 too, and tp 2 x dp 2
# on 4), which generates at tp 1 on every rank from weights gathered in memory, and for split
# placement (a tp 2 actor, and VAPO with its critic, on 2 ranks, 1 rollout-only rank receiving
# its weights); a tp 2 checkpoint resumes at tp 1 with a rollout rank and serves with ms-infer.
# Asynchronous rollouts on split placement's rollout rank (staleness 1) equal the one-rank run's rollout
# thread (bit for bit with one trainer, to 1e-4 at tp 2), resume bit for bit, and a failing
# rollout rank or trainer ends every rank with its message. Also a prompts_per_step that the
# ranks cannot share, colocated asynchronous rollouts on two ranks, a tp not dividing the
# ranks, and a split placement leaving no trainer, are refused by name.
# Usage: rl_dp_test.sh <mpirun> <bin dir> <source dir> <make_tiny_model>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
MAKE=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Two key/value heads: tp 2 splits them whole.
bash "$SRC/tests/e2e/rl_tiny_actor.sh" "$work" "$BIN" "$SRC" "$MAKE" 2
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

compare() {  # compare <one-rank run dir> <two-rank run dir> [relative tolerance, 1e-5]
  python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import json, sys
rtol = float(sys.argv[3])
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
        # The KLs are means of differences of log-probs near -10: fp32 rounding in those
        # (a tp actor's GEMMs sum in another order) is 1e-6 absolute, well above 1e-5 of a
        # KL near 1e-3. The loss is a mean of ratio x advantage terms of size ~1 (advantages
        # normalised within each group, so they cancel): its error follows that scale, 1e-5
        # of it, not of the small mean (with stale rollouts the ratios carry two models'
        # rounding, not one's).
        floor = (1e-6 if k.endswith("_kl") else 1e-5 if k == "loss" else 1e-9) * rtol / 1e-5
        assert abs(a[k] - b[k]) <= rtol * max(abs(a[k]), abs(b[k])) + floor, (k, a[k], b[k])
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

# A tensor-parallel actor equals one rank: DAPO (dynamic sampling pooling the groups of a tp
# group) at tp 2 on 2 ranks, GRPO with KL at tp 2 x dp 2 on 4, VAPO with its critic at tp 2 on
# 2; and split placement: DAPO, and VAPO with its critic, at tp 2 on 2 ranks generating on a
# third.
for run in dapo.tp2:2 grpo.tp2dp2:4 vapo.tp2:2 dapo.split:3 vapo.split:3; do
  name=${run%%:*} np=${run##*:} algo=${run%%.*}
  case $algo in
    grpo) section="{name: grpo, kl_coef: 0.01}"; reward=$work/vowels.py ;;
    dapo) section="{name: dapo, max_rounds: 8}"; reward=$work/parity.py ;;
    vapo) section="{name: vapo}"; reward=$work/vowels.py ;;
  esac
  critic=""
  [ $algo = vapo ] && critic="critic: {warmup_steps: 1, lr: 0.02}"
  # Against the one-rank run above: the same config but for the layout.
  config "$work/$name.yaml" "$work/$name" "$section" "$reward" 4
  echo "$critic" >> "$work/$name.yaml"
  echo "parallel: {tp: 2}" >> "$work/$name.yaml"
  line="training at tp 2 x dp $((np / 2)), generating at tp 1 x dp $np;"
  if [ "${name#*.}" = split ]; then
    echo "placement: {mode: split, rollout_ranks: 1}" >> "$work/$name.yaml"
    line="training at tp 2 x dp 1, generating at tp 1 x dp 1 on 1 rollout-only rank(s)"
  fi
  timeout -k 5 240 "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" rl --config "$work/$name.yaml" \
    > "$work/$name.log" 2>&1 < /dev/null || { cat "$work/$name.log"; fail "$name on $np ranks"; }
  grep -q "$line" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: no hybrid-engine line"; }
  compare "$work/$algo.1" "$work/$name" || fail "$name differs from one rank"
  python3 - "$work/$name/rl_steps.jsonl" <<'PY' || fail "$name: no reshard figures"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["reshard_bytes"] > 0 and r["reshard_s"] >= 0 for r in rows), rows
PY
  echo "ok: $name on $np ranks = one rank"
done
# The tp 2 run's checkpoint after 2 steps, resumed at tp 1 with a rollout-only rank (the
# trainer restores the position and hands it on) to step 3, equals the one-rank run; it serves
# with ms-infer.
config "$work/cross.yaml" "$work/cross" "{name: grpo, kl_coef: 0.01}" "$work/vowels.py" 4
sed -i "s/steps: 3,/steps: 2,/" "$work/cross.yaml"
echo "parallel: {tp: 2}" >> "$work/cross.yaml"
timeout -k 5 240 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/cross.yaml" \
  > "$work/cross.log" 2>&1 < /dev/null || { cat "$work/cross.log"; fail "tp 2 for 2 steps"; }
config "$work/cross.yaml" "$work/cross" "{name: grpo, kl_coef: 0.01}" "$work/vowels.py" 4
echo "placement: {mode: split, rollout_ranks: 1}" >> "$work/cross.yaml"
timeout -k 5 240 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/cross.yaml" \
  > "$work/cross.resume.log" 2>&1 < /dev/null ||
  { cat "$work/cross.resume.log"; fail "resuming the tp 2 checkpoint at tp 1 with a rollout rank"; }
grep -q "resumed from .*step-00000002 after step 2" "$work/cross.resume.log" ||
  { cat "$work/cross.resume.log"; fail "the split run did not resume the tp 2 checkpoint"; }
compare "$work/grpo.1" "$work/cross" || fail "tp 2 resumed at tp 1 with a rollout rank differs from one rank"
"$BIN/ms-infer" generate --checkpoint "$work/cross/checkpoints/step-00000002" --prompt "Mia has" \
  --max-tokens 3 > "$work/cross.gen" 2>&1 || { cat "$work/cross.gen"; fail "ms-infer cannot serve the tp 2 checkpoint"; }
echo "ok: a tp 2 checkpoint resumes at tp 1 with a rollout rank, and serves"
config "$work/tpodd.yaml" "$work/tpodd" "{name: grpo}" "$work/vowels.py" 4
echo "parallel: {tp: 2}" >> "$work/tpodd.yaml"
if "$BIN/ms-train" rl --config "$work/tpodd.yaml" > "$work/tpodd.log" 2>&1; then
  fail "tp 2 on one rank should be refused"
fi
grep -q "parallel.tp (2) must divide the ranks (1)" "$work/tpodd.log" || { cat "$work/tpodd.log"; fail "the tp/ranks refusal does not name the key"; }
config "$work/alloff.yaml" "$work/alloff" "{name: grpo}" "$work/vowels.py" 4
echo "placement: {mode: split, rollout_ranks: 1}" >> "$work/alloff.yaml"
if "$BIN/ms-train" rl --config "$work/alloff.yaml" > "$work/alloff.log" 2>&1; then
  fail "split placement with no training rank should be refused"
fi
grep -q "placement.rollout_ranks (1) must leave at least one of the 1 ranks to train" "$work/alloff.log" ||
  { cat "$work/alloff.log"; fail "the placement refusal does not name the key"; }

config "$work/odd.yaml" "$work/odd" "{name: grpo}" "$work/vowels.py" 3
if timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/odd.yaml" \
  > "$work/odd.log" 2>&1 < /dev/null; then
  fail "3 prompts per step on 2 ranks should be refused"
fi
grep -q "rollout.prompts_per_step (3) must be a multiple of the ranks (2)" "$work/odd.log" ||
  { cat "$work/odd.log"; fail "the refusal does not name the key"; }
# Colocated asynchronous rollouts are one rank's: refused by name on two.
config "$work/async.yaml" "$work/async" "{name: grpo}" "$work/vowels.py"
sed -i "s/temperature: 1.0}/temperature: 1.0, async_staleness: 1}/" "$work/async.yaml"
if timeout -k 5 120 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/async.yaml" \
  > "$work/async.log" 2>&1 < /dev/null; then
  fail "colocated asynchronous rollouts on 2 ranks should be refused"
fi
grep -q "colocated rollout.async_staleness runs on one rank, got 2" "$work/async.log" ||
  { cat "$work/async.log"; fail "the async refusal does not name the key"; }

# Asynchronous rollouts on split placement's rollout ranks (Laminar): with staleness 1 the
# rollout rank generates step i + 1 while the trainer updates step i, from the weights after
# step i - 1. One trainer and one rollout rank equal the one-rank run's rollout thread bit for
# bit (every figure but the timings). A tp 2 trainer pair with a rollout rank equals it to
# 1e-4: the ratio now compares log-probs of two weight versions taken in two layouts (the
# behavior's on the rollout rank's whole weights, the current policy's on tp slices), so the
# layouts' rounding (1e-7 of each log-prob) no longer cancels in it as it does when both come
# from the same actor, and Adam's first updates carry it into the weights; synchronous tp 2
# above holds 1e-5.
config "$work/a1.yaml" "$work/a1" "{name: grpo, kl_coef: 0.01}" "$work/vowels.py" 4
sed -i "s/temperature: 1.0}/temperature: 1.0, async_staleness: 1}/" "$work/a1.yaml"
"$BIN/ms-train" rl --config "$work/a1.yaml" > "$work/a1.log" 2>&1 || { cat "$work/a1.log"; fail "async on one rank"; }
for run in asplit:2:1 asplit.tp2:3:2; do
  name=${run%%:*} np=${run#*:} np=${np%%:*} tp=${run##*:}
  sed "s|dir: $work/a1|dir: $work/$name|" "$work/a1.yaml" > "$work/$name.yaml"
  printf 'placement: {mode: split, rollout_ranks: 1}\nparallel: {tp: %s}\n' "$tp" >> "$work/$name.yaml"
  timeout -k 5 240 "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" rl --config "$work/$name.yaml" \
    > "$work/$name.log" 2>&1 < /dev/null || { cat "$work/$name.log"; fail "$name on $np ranks"; }
  tolerance=1e-5
  [ "$tp" = 2 ] && tolerance=1e-4
  compare "$work/a1" "$work/$name" $tolerance || fail "$name differs from the one-rank asynchronous run"
  python3 - "$work/a1" "$work/$name" "$tp" <<'PY' || fail "$name: not the one-rank run's versions and figures"
import json, sys
def rows(d):
    return [json.loads(l) for l in open(f"{d}/rl_steps.jsonl")]
one, split = rows(sys.argv[1]), rows(sys.argv[2])
assert [r["weight_version"] for r in split] == [0, 0, 1], split
assert all(r["rollout_wait_s"] >= 0 for r in split), split
if sys.argv[3] == "1":
    for a, b in zip(one, split):
        for k in a:
            if k not in ("rollout_s", "update_s"):
                assert a[k] == b[k], (k, a[k], b[k])
PY
  echo "ok: $name, staleness 1 on a rollout rank = one rank's rollout thread"
done

# Resume: 2 steps then a resume to 3 equal the 3 steps of asplit in one go, bit for bit: the
# trainer's checkpoint after step 2 holds the weights after step 1 that step 3's rollouts come
# from.
sed "s|dir: $work/a1|dir: $work/shalf|; s/steps: 3,/steps: 2,/" "$work/a1.yaml" > "$work/shalf.yaml"
echo "placement: {mode: split, rollout_ranks: 1}" >> "$work/shalf.yaml"
for half in 1 2; do
  [ $half = 2 ] && sed -i "s/steps: 2,/steps: 3,/" "$work/shalf.yaml"
  timeout -k 5 240 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/shalf.yaml" \
    > "$work/shalf$half.log" 2>&1 < /dev/null || { cat "$work/shalf$half.log"; fail "split async, part $half"; }
done
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); assert m["state"]["async_versions"] == [1], m["state"]' \
  "$work/shalf/checkpoints/step-00000002/manifest.json" || fail "the split async checkpoint does not hold version 1"
! grep -q "not bitwise" "$work/shalf2.log" || { cat "$work/shalf2.log"; fail "split async resume substituted a version"; }
python3 - "$work/asplit" "$work/shalf" <<'PY' || fail "the resumed split asynchronous run differs from the uninterrupted one"
import json, sys
def rows(d, f):
    return [json.loads(l) for l in open(f"{d}/{f}")]
full, half = rows(sys.argv[1], "rl_steps.jsonl"), rows(sys.argv[2], "rl_steps.jsonl")
assert [r["weight_version"] for r in full] == [0, 0, 1], full
assert len(half) == 3
for a, b in zip(full, half):
    for k in a:
        if k not in ("rollout_s", "update_s", "reshard_s", "rollout_wait_s"):
            assert a[k] == b[k], (k, a, b)
assert rows(sys.argv[1], "rl_eval.jsonl") == rows(sys.argv[2], "rl_eval.jsonl")
PY
echo "ok: split async resumes bitwise"

# A failure on either side ends every rank with its message: the reward program failing on
# the rollout rank in step 2 (while the trainer updates step 1), and the trainer failing to
# write its checkpoint after step 1 (while the rollout rank generates step 2).
expect_split_failure() {  # expect_split_failure <name> <message regex>
  local rc=0
  timeout -k 5 60 "$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" rl --config "$work/$1.yaml" \
    > "$work/$1.log" 2>&1 < /dev/null || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] ||
    { cat "$work/$1.log"; fail "$1: exit status $rc (0: no failure; 124/137: a hang)"; }
  grep -Eq "$2" "$work/$1.log" || { cat "$work/$1.log"; fail "$1: no '$2' in the output"; }
}
sed "s|dir: $work/a1|dir: $work/rfail|" "$work/a1.yaml" > "$work/rfail.yaml"
echo "placement: {mode: split, rollout_ranks: 1}" >> "$work/rfail.yaml"
sed -i "s|program: \"python3 $work/vowels.py\"|program: \"if [ -e $work/rfail.once ]; then exit 3; fi; touch $work/rfail.once; python3 $work/vowels.py\"|" \
  "$work/rfail.yaml"
expect_split_failure rfail "error: reward program .* exited with status 3"
sed "s|dir: $work/a1|dir: $work/tfail|" "$work/a1.yaml" > "$work/tfail.yaml"
printf 'placement: {mode: split, rollout_ranks: 1}\ncheckpoint: {every: 1, resume: none}\n' >> "$work/tfail.yaml"
mkdir -p "$work/tfail" && touch "$work/tfail/checkpoints"
expect_split_failure tfail "saving checkpoint step 1 failed on rank 0: .*tfail/checkpoints"
echo "ok: a failing rollout rank or trainer ends the split asynchronous run on every rank"
echo "rl dp e2e: ok"
