#!/usr/bin/env bash
# One job per run directory (docs/train.md, "One job per run directory"):
#   two   a second `mpirun -np 2 ms-train`, and a single ms-train, on the run.dir of a running
#         2-rank job both exit 1 naming the holder (rank 0's pid and host, from train.lock);
#         the first job goes on: its telemetry counts every step once, its config stays, and
#         the checkpoint it saves when stopped verifies
#   supervise  a second `ms-diagnose supervise` on the same run.dir is refused naming the
#         first; the first SIGKILLed, no process of its job remains and both locks are free
# Usage: run_dir_lock_test.sh <mpirun> <bin dir> <source dir>
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
work=$(mktemp -d)
# Whatever this test started that is still running (found by its unique run directories).
cleanup() {
  for pid in $(pgrep -f -- "run.dir=$work/" || true); do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 16 512 16
train=("$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${TINY_MODEL[@]}"
       --set data.plan="$work/s16.plan" --set model.max_seq_len=16 --set train.seq_len=16
       --set train.steps=1000000 --set train.global_batch=4 --set train.micro_batch=2
       --set train.eval_every=0 --set train.log_every=1 --set train.mfu_peak_gflops=1
       --set checkpoint.every=4)

wait_for() {  # wait_for <file> <pattern>: up to a minute for the pattern to appear
  for _ in $(seq 1 600); do
    grep -q -- "$2" "$1" 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}

# --- two jobs on one run.dir
"$MPIRUN" --oversubscribe -np 2 "${train[@]}" --set run.dir="$work/run" > "$work/first.out" 2>&1 &
first=$!
wait_for "$work/first.out" "step 5/" || { cat "$work/first.out"; fail "the first job makes no progress"; }
holder=$(head -n 1 "$work/run/train.lock")
[[ "$holder" =~ ^pid\ ([0-9]+)\ on\ host\ $(hostname)$ ]] || fail "train.lock holds '$holder'"
pgrep -P "$first" | grep -qx "${BASH_REMATCH[1]}" || fail "train.lock names no rank of mpirun $first"
config_before=$(sha256sum < "$work/run/config.resolved.yaml")
refused() {  # refused <name> <command...>: exits non-zero naming the first job's holder
  local name=$1 rc=0
  shift
  "$@" --set run.dir="$work/run" > "$work/$name.out" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: a second job on the run.dir exited 0"
  grep -q "^ms-train: error: .*run.dir $work/run is in use by another training job: .*train.lock is held by $holder" \
    "$work/$name.out" || { cat "$work/$name.out"; fail "$name: the refusal does not name $holder"; }
}
refused second-mpi "$MPIRUN" --oversubscribe -np 2 "${train[@]}"
[ "$(grep -c '^ms-train: error: ' "$work/second-mpi.out")" -eq 1 ] ||
  fail "the 2-rank refusal is not printed once"
refused second-alone "${train[@]}"
kill -0 "$first" 2> /dev/null || fail "the first job ended when the second was refused"
kill -USR1 "$first"
status=0
wait "$first" || status=$?
[ "$status" -eq 0 ] || { cat "$work/first.out"; fail "the first job exited $status after SIGUSR1"; }
for rank in 00000 00001; do
  grep '"kind":"step"' "$work/run/telemetry/rank-$rank.jsonl" | grep -oE '"step":[0-9]+' |
    cut -d: -f2 | awk 'NR == 1 && $1 != 1 { bad = 1 } NR > 1 && $1 != prev + 1 { bad = 1 }
                       { prev = $1 } END { exit bad || NR < 5 }' ||
    fail "rank $rank's telemetry does not count each step once"
done
[ "$(sha256sum < "$work/run/config.resolved.yaml")" = "$config_before" ] ||
  fail "config.resolved.yaml changed"
"$BIN/ms-ckpt" verify "$work/run/checkpoints/latest" > "$work/verify.out" 2>&1 ||
  { cat "$work/verify.out"; fail "the first job's last checkpoint does not verify"; }
echo "ok: a second job on a run.dir is refused naming the holder; the first is intact"

# --- a supervisor that dies takes its job with it
supervise=("$BIN/ms-diagnose" supervise --ranks 2 --quiet --start-timeout 120 --)
"${supervise[@]}" "$MPIRUN" --oversubscribe -np '{np}' "${train[@]}" --set run.dir="$work/sup" \
  > "$work/sup.out" 2>&1 &
sup=$!
wait_for "$work/sup/telemetry/rank-00000.jsonl" '"kind":"step"' ||
  { cat "$work/sup.out"; fail "the supervised job makes no progress"; }
rc=0
"${supervise[@]}" "$MPIRUN" --oversubscribe -np '{np}' "${train[@]}" --set run.dir="$work/sup" \
  > "$work/sup2.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/sup2.out"; fail "a second supervisor exited $rc, not 1"; }
grep -q "^ms-diagnose: error: run.dir $work/sup is already supervised: .*supervise.lock is held by pid $sup on host" \
  "$work/sup2.out" || { cat "$work/sup2.out"; fail "the second supervisor's refusal names no holder"; }
job_pids=$(pgrep -f -- "run.dir=$work/sup" | grep -vx "$sup" || true)
[ -n "$job_pids" ] || fail "no job processes found under the supervisor"
kill -KILL "$sup"
wait "$sup" 2> /dev/null || true
for _ in $(seq 1 600); do
  left=$(pgrep -f -- "run.dir=$work/sup" || true)
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] || { ps -o pid,ppid,args -p "$(tr '\n' ',' <<<"$left" | sed 's/,$//')"; fail "the job outlived its SIGKILLed supervisor"; }
flock -n "$work/sup/train.lock" true || fail "train.lock is still held"
flock -n "$work/sup/supervise.lock" true || fail "supervise.lock is still held"
echo "ok: a second supervisor is refused; a SIGKILLed supervisor's job ends with it"
