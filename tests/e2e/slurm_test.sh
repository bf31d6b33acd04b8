#!/usr/bin/env bash
# The batch scripts of scripts/slurm/ submitted to a real Slurm with `sbatch --wait`, on tiny
# configs: the dataset job's datasets verify; training jobs interrupted mid-run (`scontrol
# requeue`, or the time-limit warning) resume from their checkpoint and log the losses of an
# uninterrupted run bit for bit, ending with the same weights, data-parallel and
# tensor-parallel over the tasks; the reshard job's output diffs clean against its input; the
# export job's model matches the checkpoint; the check job exits 0. The check job and one
# training job run with mpirun inside the allocation (the scripts' fallback), the others with
# srun --mpi=pmix where the cluster offers it.
# Skips (exit 77) when no Slurm cluster answers: scripts/slurm_local.sh starts one.
# Usage: slurm_test.sh <bin dir> <source dir>
set -euo pipefail
BIN=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

if [ -z "${SLURM_CONF:-}" ] && [ -f "${SLURM_LOCAL_DIR:-/tmp/ms-slurm}/slurm.conf" ]; then
  export SLURM_CONF=${SLURM_LOCAL_DIR:-/tmp/ms-slurm}/slurm.conf
fi
for tool in sbatch sinfo scontrol squeue; do
  command -v "$tool" > /dev/null ||
    skip "Slurm is not installed ($tool not found); scripts/slurm_local.sh install && scripts/slurm_local.sh start"
done
sinfo -h > /dev/null 2>&1 ||
  skip "no Slurm cluster answers (SLURM_CONF=${SLURM_CONF:-unset}); start one with scripts/slurm_local.sh start"
echo "Slurm $(sinfo --version | awk '{print $2}'), MPI plugins: $(srun --mpi=list 2>&1 | awk 'NR > 1 && NF == 1 {printf "%s ", $1}')"

work=$(mktemp -d)
jobs_file=$work/jobs.txt
cleanup() {
  # Cancel only the jobs this test submitted.
  [ -f "$jobs_file" ] && while read -r job; do scancel "$job" 2> /dev/null || true; done < "$jobs_file"
  rm -rf "$work"
}
trap cleanup EXIT
[ -n "${KEEP_WORK:-}" ] && trap - EXIT
cd "$work"
source "$SRC/tests/e2e/lib.sh"
export MS_SRC=$SRC MS_BIN=$BIN
# sbatch passes the environment on to the jobs: mpirun as root in a container (as under ctest).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
fi

# submit <name> <sbatch options and script, then its arguments...>: sbatch --wait, output in
# <name>.out; returns the job's exit code.
submit() {
  local name=$1
  shift
  sbatch --wait --chdir="$work" --output="$work/$name.out" "$@" > "$work/$name.sbatch.txt" 2>&1
}
job_id() { sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$work/$1.sbatch.txt" 2> /dev/null || true; }
show() { cat "$work/$1.out" "$work/$1.sbatch.txt" 2> /dev/null || true; }
passed=0

# The dataset job, with a plan sized for 16-token samples.
submit data --ntasks=2 "$SRC/scripts/slurm/dataset.sbatch" --set seq_len=16 \
  --set total_samples=6400 --set validation.samples=16 || { show data; fail "dataset job"; }
for prefix in data/shakespeare data/arithmetic; do
  "$BIN/ms-data" verify "$prefix" > /dev/null || { show data; fail "$prefix does not verify"; }
done
[ -f data/shakespeare.plan ] || fail "no plan"
passed=$((passed + 1))

# Rank 0 sleeps 150 ms a step (debug.slow_*, no effect on the numbers), so an interruption
# sent after step 5 lands well before the last step.
# LAYOUT adds --set keys of the parallel layout; REF names the uninterrupted run of that layout.
STEPS=30
LAYOUT=
REF=ref
train_args() {  # train_args <run dir>
  echo --config "$SRC/configs/tiny-cpu.yaml" "${TINY_MODEL[@]}" --set model.max_seq_len=16 \
    --set train.seq_len=16 --set train.steps=$STEPS --set train.global_batch=4 \
    --set train.micro_batch=2 --set train.eval_every=0 --set train.log_every=1 \
    --set checkpoint.every=5 --set checkpoint.keep=3 --set run.dir="$1" \
    --set debug.slow_rank=0 --set debug.slow_ms=150 ${LAYOUT:+$LAYOUT}
}
# step -> loss from rank 0's telemetry; a step logged twice (redone after a resume) keeps its
# last value.
losses() {
  grep '"kind":"step"' "$1/telemetry/rank-00000.jsonl" |
    sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' |
    awk '{ loss[$1] = $2 } END { for (s in loss) print s, loss[s] }' | sort -n
}

# shellcheck disable=SC2046  # train_args is a list of words without spaces
submit ref --ntasks=2 "$SRC/scripts/slurm/train.sbatch" $(train_args runs/ref) ||
  { show ref; fail "uninterrupted training job"; }

# interrupted <name> <how> [launcher]: the same run as a job interrupted after its 5th step,
# then run to the end in the same job. <how> is `requeue` (scontrol requeue: SIGTERM to the
# job, which Slurm queues again) or `warn` (SIGUSR1 to the batch shell, as
# `--signal=B:USR1@T` sends ahead of the time limit; the script requeues itself); [launcher]
# forces srun or mpirun (launch.sh). A requeued job waits for a begin time Slurm sets about two
# minutes ahead; StartTime=now lets it run again sooner. Checks that it resumed mid-run and
# that its losses and final weights are those of the uninterrupted run $REF.
interrupted() {
  local name=$1 how=$2 job='' resumed
  # shellcheck disable=SC2046
  MS_LAUNCHER=${3:-} submit "$name" --ntasks=2 "$SRC/scripts/slurm/train.sbatch" $(train_args "runs/$name") &
  local waiter=$!
  for _ in $(seq 1 300); do
    job=$(job_id "$name")
    [ -n "$job" ] && grep -q "step 5/$STEPS" "$name.out" 2> /dev/null && break
    sleep 0.1
  done
  [ -n "$job" ] && echo "$job" >> "$jobs_file"
  grep -q "step 5/$STEPS" "$name.out" 2> /dev/null || { show "$name"; fail "$name: no progress"; }
  case "$how" in
    requeue) scontrol requeue "$job" ;;
    warn) scancel --batch --signal=USR1 "$job" ;;
  esac
  for _ in $(seq 1 100); do
    [ "$(squeue -h -j "$job" -o %T 2> /dev/null || true)" = PENDING ] && break
    sleep 0.2
  done
  # slurmd refuses to start a job again within the second its previous run was killed in
  # ("Job credential revoked"), which is what Slurm's begin delay guards against.
  sleep 2
  scontrol update jobid="$job" StartTime=now
  wait "$waiter" || { show "$name"; fail "$name: the interrupted training job failed"; }
  grep -q "resuming from runs/$name/checkpoints/step-" "$name.out" ||
    { show "$name"; fail "$name: the job did not resume from a checkpoint"; }
  resumed=$(sed -n 's/.*resuming from .* (step \([0-9]*\),.*/\1/p' "$name.out" | head -n 1)
  [ -n "$resumed" ] && [ "$resumed" -gt 0 ] && [ "$resumed" -lt "$STEPS" ] ||
    fail "$name: resumed at step '$resumed', not mid-run"
  if [ "$how" = requeue ]; then
    ! grep -q "requeueing job" "$name.out" || fail "$name: the job requeued itself after SIGTERM"
  else
    grep -q "requeueing job" "$name.out" || fail "$name: the job did not requeue itself"
  fi
  losses "runs/$name" > "$name.losses"
  diff "$REF.losses" "$name.losses" > /dev/null ||
    { diff "$REF.losses" "$name.losses" | head; fail "$name: losses differ from the uninterrupted run's"; }
  "$BIN/ms-ckpt" diff "runs/$REF/checkpoints" "runs/$name/checkpoints" > "$name-diff.txt" ||
    { cat "$name-diff.txt"; fail "$name: final weights differ from the uninterrupted run's"; }
  echo "$name: resumed at step $resumed, $STEPS losses and the final weights equal the uninterrupted run's"
  passed=$((passed + 1))
}
losses runs/ref > ref.losses
[ "$(wc -l < ref.losses)" -eq "$STEPS" ] || fail "the uninterrupted run logged $(wc -l < ref.losses) steps"
interrupted requeued requeue
interrupted warned warn
interrupted warned-mpirun warn mpirun

# The two tasks as one tensor-parallel model (tp=2, dp=1): its own uninterrupted run, then one
# requeued mid-run.
LAYOUT="--set parallel.tp=2 --set model.n_kv_heads=2"
REF=ref-tp2
# shellcheck disable=SC2046
submit ref-tp2 --ntasks=2 "$SRC/scripts/slurm/train.sbatch" $(train_args runs/ref-tp2) ||
  { show ref-tp2; fail "uninterrupted tp=2 training job"; }
losses runs/ref-tp2 > ref-tp2.losses
[ "$(wc -l < ref-tp2.losses)" -eq "$STEPS" ] || fail "the uninterrupted tp=2 run logged $(wc -l < ref-tp2.losses) steps"
interrupted requeued-tp2 requeue

submit reshard --ntasks=2 "$SRC/scripts/slurm/reshard.sbatch" runs/requeued-tp2/checkpoints \
  tp=1,dp=4,zero=1 resharded || { show reshard; fail "reshard job"; }
grep -q "reshard job done" reshard.out || { show reshard; fail "reshard job did not finish"; }
passed=$((passed + 1))

submit export --ntasks=1 "$SRC/scripts/slurm/export.sbatch" runs/requeued/checkpoints hf ||
  { show export; fail "export job"; }
[ -f hf/config.json ] && compgen -G "hf/*.safetensors" > /dev/null || fail "export wrote no model"
passed=$((passed + 1))

MS_LAUNCHER=mpirun submit check --ntasks-per-node=2 "$SRC/scripts/slurm/check.sbatch" --max-bytes 65536 \
  --iters 3 --sgemm-n 64 || { show check; fail "check job did not exit 0"; }
grep -q "launcher mpirun" check.out && grep -q "# Result: HEALTHY" check.out ||
  { show check; fail "check job: no healthy verdict under mpirun"; }
[ "$(cat suspects-"$(job_id check)".txt)" = "" ] || fail "a healthy check listed suspects"
passed=$((passed + 1))

echo "Slurm batch scripts: $passed passed, 0 failed"
