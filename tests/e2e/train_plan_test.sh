#!/usr/bin/env bash
# ms-train plan (issue 16) from a shell, as a new user runs it: the search on the shipped CPU
# cluster file prints ranked layouts and the --set flags of the best, which `ms-train --dry-run`
# accepts and which train for two steps under mpirun; --json parses and every layout in it fits
# the memory limit with the global batch unchanged; --what-if reports the change; --evaluate
# predicts a config's own layout, context-parallel ones too, and the fastest cp layout's flags
# train; an uneven pipeline split is planned and evaluated; --validate trains the candidates and
# reports the measured ranks; a 70B model on the H100 file plans without allocating it;
# --profile writes a cluster file (with its timings' spread and load) the planner reads back; a bad cluster file is refused naming
# the file and the key; plain `ms-train --dry-run` is unchanged.
# Usage: train_plan_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

CPU=$SRC/configs/clusters/cpu-2core.yaml
H100=$SRC/configs/clusters/h100-8x.yaml
shakespeare_plan 32 256 16
model=(--set data.plan="$work/s32.plan" --set train.seq_len=32 --set model.max_seq_len=32
       --set model.vocab_size=50257 --set model.d_model=32 --set model.n_layers=4
       --set model.n_heads=4 --set model.n_kv_heads=2 --set model.d_ff=64
       --set train.global_batch=8 --set train.micro_batch=2)
config=$SRC/configs/tiny-dense.yaml

# The search: a table, the best command, only layouts of 4 ranks.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --top 6 > "$work/plan.txt" ||
  fail "plan exited $?"
grep -q "^# run: mpirun -np 4 ms-train --config $config --set parallel.dp=" "$work/plan.txt" ||
  fail "no run command: $(cat "$work/plan.txt")"
grep -q "^# recommended: layout [0-9]*, .*: " "$work/plan.txt" || fail "no recommendation: $(cat "$work/plan.txt")"
[ "$(grep -c '^[1-6] ' "$work/plan.txt")" = 6 ] || fail "expected 6 ranked rows: $(cat "$work/plan.txt")"
grep -q "layouts the trainer accepts" "$work/plan.txt" || fail "no count of layouts"

# --json: parses; every layout fits the limit and keeps the global batch.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --top 20 --json > "$work/plan.json"
python3 - "$work/plan.json" > "$work/flags.txt" <<'PY' || fail "bad JSON: $(head -c 400 "$work/plan.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["cluster"]["ranks"] == 4 and d["layouts"], d
limit = d["cluster"]["memory_per_rank_gib"] * 1024
steps = [l["step_s"] for l in d["layouts"]]
assert steps == sorted(steps), steps
for l in d["layouts"]:
    x = l["layout"]
    assert x["dp"] * x["tp"] * x["pp"] * x["cp"] == 4, x
    assert d["global_batch"] % (x["dp"] * x["micro_batch"]) == 0, x
    assert 0 < l["peak_memory_mib"] <= limit, l
    m = l["memory"][0]
    assert abs(m["weights_mib"] + m["gradients_mib"] + m["optimizer_mib"] + m["activations_mib"]
               + m["runtime_mib"] - m["total_mib"]) < 1e-6, m
    assert 0 < l["mfu"] < 1 and 0 <= l["bubble"] < 1, l
    assert set(l["axes"]) == {"dp", "tp", "pp", "ep", "cp"}, l
# The best first (it trains below), then the next two without cp for the dry run, which does not
# take cp layouts yet (see the cp part below).
best, rest = d["layouts"][0], [l for l in d["layouts"][1:] if l["layout"]["cp"] == 1][:2]
for l in [best] + rest:
    print(" ".join("--set " + f for f in l["set"]))
PY

# The printed flags run: the dry run accepts the top layouts without cp; the best trains two steps.
while read -r flags; do
  [[ $flags == *parallel.cp=1* ]] || continue
  # shellcheck disable=SC2086
  "$BIN/ms-train" --config "$config" "${model[@]}" $flags --dry-run --ranks 4 > "$work/dry.txt" 2>&1 ||
    fail "the planner's flags do not run: $flags: $(cat "$work/dry.txt")"
done < "$work/flags.txt"
best=$(head -1 "$work/flags.txt")
# shellcheck disable=SC2086
"$MPIRUN" --oversubscribe -np 4 "$BIN/ms-train" --config "$config" "${model[@]}" $best \
  --set run.dir="$work/best" --set train.steps=2 --set train.eval_every=0 --set checkpoint.every=0 \
  --set train.mfu_peak_gflops=1 > "$work/best.out" 2>&1 || fail "the best layout does not train: $(tail -20 "$work/best.out")"
grep -q "step 2/2" "$work/best/log.txt" || fail "no step 2 in the best layout's log"

# Context parallelism is searched: the fastest cp layout of all that fit (seq_len 32 splits
# into 2 cp chunks for cp 2, 4, 8, 16) trains two steps with its flags.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --top 100000 --json > "$work/all.json"
cpflags=$(python3 - "$work/all.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cp = [l for l in d["layouts"] if l["layout"]["cp"] > 1]
assert cp, "no cp layout offered"
l = cp[0]
assert "parallel.cp=%d" % l["layout"]["cp"] in l["set"], l["set"]
assert " cp%d" % l["layout"]["cp"] in l["name"], l["name"]
assert l["axes"]["cp"]["bytes"] > 0, l["axes"]
print(" ".join("--set " + f for f in l["set"]))
PY
) || fail "no cp layout in the search: $(head -c 400 "$work/all.json")"
# (Not through --dry-run yet: train::describe_layout builds its mesh with cp 1 and refuses
# every cp > 1 layout, configs/long-context.yaml's too; training them is the stronger check.)
# shellcheck disable=SC2086
"$MPIRUN" --oversubscribe -np 4 "$BIN/ms-train" --config "$config" "${model[@]}" $cpflags \
  --set run.dir="$work/cp" --set train.steps=2 --set train.eval_every=0 --set checkpoint.every=0 \
  --set train.mfu_peak_gflops=1 > "$work/cp.out" 2>&1 || fail "the cp layout does not train: $(tail -20 "$work/cp.out")"
grep -q "step 2/2" "$work/cp/log.txt" || fail "no step 2 in the cp layout's log"

# --what-if: slower links and faster compute report a change.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --what-if net=0.5,compute=2 \
  > "$work/whatif.txt" || fail "what-if exited $?"
grep -q "^# what-if net=0.5, compute=2:" "$work/whatif.txt" || fail "no what-if: $(cat "$work/whatif.txt")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --what-if compute=2 --json |
  python3 -c 'import json,sys; w=json.load(sys.stdin)["what_if"]; assert w["step_change"] < 0, w' ||
  fail "compute=2 did not shorten the step"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --what-if disk=2 > /dev/null 2> "$work/err.txt" &&
  fail "an unknown what-if factor was accepted"
grep -q "unknown factor 'disk'" "$work/err.txt" || fail "what-if error: $(cat "$work/err.txt")"

# --evaluate: the config's own layout, per pipeline rank.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --ranks 2 --evaluate \
  --set parallel.pp=2 --set parallel.dp=1 > "$work/eval.txt" || fail "evaluate exited $?"
grep -q "^# pp rank 1:" "$work/eval.txt" || fail "no per-stage memory: $(cat "$work/eval.txt")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --ranks 2 --evaluate \
  --set parallel.cp=2 > "$work/eval.txt" || fail "evaluate with cp exited $?"
grep -q "^1  dp1 tp1 pp1 cp2 mb2 " "$work/eval.txt" || fail "no cp2 layout evaluated: $(cat "$work/eval.txt")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --ranks 3 --evaluate \
  --set parallel.cp=2 --set parallel.loaders=1 > /dev/null 2> "$work/err.txt" &&
  fail "cp with a loader rank was evaluated"
grep -q "parallel.cp (2) does not work with parallel.loaders (1)" "$work/err.txt" ||
  fail "cp with loaders error: $(cat "$work/err.txt")"

# An uneven pipeline split (issue 50): 5 layers at pp 2 are planned and evaluated, and the split's
# flags train.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --set model.n_layers=5 --cluster "$CPU" --ranks 2 \
  --top 1000 > "$work/uneven.txt" || fail "5-layer plan exited $?"
grep -q " pp2 1f1b split3+2 " "$work/uneven.txt" || fail "no uneven split planned: $(grep -c pp2 "$work/uneven.txt")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --set model.n_layers=5 --cluster "$CPU" --ranks 2 \
  --evaluate --set parallel.pp=2 --set parallel.dp=1 --set 'parallel.pp_layers=[2,3]' > "$work/eval.txt" ||
  fail "uneven evaluate exited $?"
grep -q "^1  dp1 tp1 pp2 1f1b split2+3 " "$work/eval.txt" || fail "uneven evaluate: $(cat "$work/eval.txt")"
# --validate: the candidates train on the ranks and the fastest measured is reported.
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$CPU" --ranks 2 --validate 3 \
  --validate-top 2 --validate-dir "$work" --validate-launcher "$MPIRUN --oversubscribe -np {ranks}" \
  --json > "$work/validate.json" 2> "$work/validate.err" || fail "validate: $(tail -20 "$work/validate.err")"
python3 - "$work/validate.json" <<'PY' || fail "validate json: $(head -c 800 "$work/validate.json")"
import json, sys
d = json.load(open(sys.argv[1]))
v = d["validation"]
assert len(v["runs"]) == 2 and v["runs"][0]["recommended"], v
assert v["runs"][0]["name"] == d["recommended"]["name"], (v, d["recommended"])
assert all(r["measured_s"] > 0 for r in v["runs"]) and v["recommended_measured_rank"] in (1, 2), v
assert sorted(r["measured_rank"] for r in v["runs"]) == [1, 2], v
PY

# A 70B model on 64 H100s plans in seconds: it is never allocated.
llama70b=(--set model.vocab_size=128256 --set model.d_model=8192 --set model.n_layers=80
          --set model.n_heads=64 --set model.n_kv_heads=8 --set model.d_ff=28672
          --set model.max_seq_len=8192 --set train.seq_len=8192 --set train.global_batch=128
          --set train.micro_batch=1)
timeout 120 "$BIN/ms-train" plan --config "$config" "${llama70b[@]}" --cluster "$H100" --json > "$work/70b.json" ||
  fail "70B plan exited $?"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d["layouts"][0]; assert b["layout"]["tp"]*b["layout"]["pp"]>1 and 0.2<b["mfu"]<0.8, b' \
  "$work/70b.json" || fail "70B plan: $(head -c 600 "$work/70b.json")"

# --profile under mpirun writes a cluster file the planner reads.
"$MPIRUN" --oversubscribe -np 2 "$BIN/ms-train" plan --profile "$work/measured.yaml" \
  --config "$config" "${model[@]}" --profile-ranks 2 > "$work/profile.out" 2>&1 ||
  fail "profile: $(cat "$work/profile.out")"
grep -q "^  measured_ops:" "$work/measured.yaml" || fail "no measured op shapes: $(head -30 "$work/measured.yaml")"
# ... with what the timings are worth: their spread and the CPU share others took meanwhile.
grep -q "^profile: {spread: [0-9.e-]*, load_share: [0-9.e-]*, repeated: [0-9]*}" "$work/measured.yaml" ||
  fail "no profile quality: $(tail -3 "$work/measured.yaml")"
grep -q "other processes took .*% of the CPU" "$work/profile.out" || fail "profile load line: $(cat "$work/profile.out")"
# ... and what a dp reduction adds to a step, measured with the trainer's pattern.
dp_cost='{reduce_scatter: [0-9.e-]*, allreduce: [0-9.e-]*, ranks: [0-9]*}'
grep -q "^overlap: {dp_s_per_mib: $dp_cost}" "$work/measured.yaml" || fail "no measured dp cost: $(tail -4 "$work/measured.yaml")"
# ... and the context-parallel ring run on a cp group at the model's shapes, which a cp layout's
# prediction then takes instead of 1/cp of the attention.
grep -q "^    cp_attn_fwd [0-9x]*x2: " "$work/measured.yaml" && grep -q "^    cp_attn_bwd [0-9x]*x2: " "$work/measured.yaml" ||
  fail "no measured cp ring: $(grep -c cp_attn "$work/measured.yaml")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/measured.yaml" --ranks 2 --evaluate \
  --set parallel.cp=2 --json > "$work/cp.json" || fail "cp evaluate on the measured file exited $?"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["cp_ring_measured"] is True, d' "$work/cp.json" ||
  fail "the cp prediction did not take the measured ring: $(head -c 400 "$work/cp.json")"
# ... with the run's own layers timed at its micro-batches, which the prediction then scales by.
grep -q "^    layer_fwd [0-9]*x[0-9]*: " "$work/measured.yaml" &&
  grep -q "^    layer_bwd [0-9]*x[0-9]*: " "$work/measured.yaml" ||
  fail "no measured layers: $(grep -c layer_ "$work/measured.yaml")"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/measured.yaml" --json > "$work/measured.json" ||
  fail "the measured cluster file does not plan"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["layouts"][0]["layer_calibration"]; assert c["fwd"] != 1 and c["bwd"] != 1 and 0.2 < c["fwd"] < 5 and 0.2 < c["bwd"] < 5, c' \
  "$work/measured.json" || fail "layer calibration: $(head -c 600 "$work/measured.json")"
# More ranks than cores: the links again with every rank at once (links.oversubscribed), which a
# job of that many ranks then plans with.
cores=$(getconf _NPROCESSORS_ONLN)  # not nproc: it follows OMP_NUM_THREADS
over=$(( cores + 1 ))
"$MPIRUN" --oversubscribe -np "$over" "$BIN/ms-train" plan --profile "$work/over.yaml" > "$work/over.out" 2>&1 ||
  fail "oversubscribed profile: $(cat "$work/over.out")"
grep -q "^  oversubscribed: {bandwidth_gbs: " "$work/over.yaml" || fail "no oversubscribed link: $(grep -A4 '^links' "$work/over.yaml")"
grep -q "^overlap: {dp_s_per_mib: $dp_cost, dp_s_per_mib_oversubscribed: $dp_cost}" "$work/over.yaml" ||
  fail "no oversubscribed dp cost: $(tail -4 "$work/over.yaml")"
grep -q "^  oversubscribed:" "$work/measured.yaml" && [ "$cores" -ge 2 ] && fail "an oversubscribed link from one rank per core"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/over.yaml" --ranks 4 > /dev/null ||
  fail "the oversubscribed cluster file does not plan"
"$BIN/ms-train" plan --profile "$work/alone.yaml" > /dev/null 2> "$work/err.txt" && fail "a one-rank profile was accepted"
grep -q "needs at least two ranks" "$work/err.txt" || fail "one-rank profile error: $(cat "$work/err.txt")"

# Bad cluster files: the file and the key are named.
grep -v "^ranks:" "$CPU" > "$work/bad.yaml"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/bad.yaml" > /dev/null 2> "$work/err.txt" &&
  fail "a cluster file without ranks was accepted"
grep -q "ms-train: error: $work/bad.yaml: ranks is required" "$work/err.txt" || fail "missing-key error: $(cat "$work/err.txt")"
sed 's/^memory_per_rank_gib:/memory_per_rank_gb:/' "$CPU" > "$work/bad2.yaml"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/bad2.yaml" > /dev/null 2> "$work/err.txt" &&
  fail "a misspelt key was accepted"
grep -q "memory_per_rank_gb is not a cluster-file key" "$work/err.txt" || fail "unknown-key error: $(cat "$work/err.txt")"
"$BIN/ms-train" plan --config "$config" --cluster "$work/none.yaml" > /dev/null 2> "$work/err.txt" && fail "a missing file was accepted"
grep -q "no cluster file at $work/none.yaml" "$work/err.txt" || fail "missing-file error: $(cat "$work/err.txt")"
"$BIN/ms-train" plan --config "$config" > /dev/null 2> "$work/err.txt" && fail "no --cluster was accepted"
grep -q "no cluster file given" "$work/err.txt" || fail "no-cluster error: $(cat "$work/err.txt")"

# Too little memory: the smallest peak is named.
sed 's/^memory_per_rank_gib: .*/memory_per_rank_gib: 0.001/' "$CPU" > "$work/small.yaml"
"$BIN/ms-train" plan --config "$config" "${model[@]}" --cluster "$work/small.yaml" > /dev/null 2> "$work/err.txt" &&
  fail "no layout fits, yet the plan succeeded"
grep -q "layouts fits memory_per_rank_gib" "$work/err.txt" || fail "memory error: $(cat "$work/err.txt")"

# Training without a subcommand is unchanged.
"$BIN/ms-train" --config "$config" "${model[@]}" --dry-run > "$work/dry.txt" || fail "plain dry run"
grep -q "^# layout on" "$work/dry.txt" || fail "plain dry run output: $(head "$work/dry.txt")"
echo "PASS"
