#!/usr/bin/env bash
# `ms-diagnose supervise` over a 4-rank tiny run (one machine: each rank slot stands for a
# machine) with faults injected by the run config's debug.* keys. Every case but "repeat" must
# complete every step with the final losses of an uninterrupted run (within 1e-5 relative; the
# data-parallel size shrinks when a slot is removed and the global batch stays 12), and its
# event log must tell what happened. Cases:
#   kill     slot 2 killed at step 5: a crash, slot 2 removed, restart on 3 ranks
#   hang     slot 1 hangs at step 6: the watchdog's reports name it, removed
#   stall    slot 2 is slow in step 5 and hangs at step 6, with a hang timeout (8 s) well past
#            detection's window and period: a stalled job repeats no step, so it is a hang of
#            slot 2, not a slow slot 2 (detect's grid holds the last step's compute while stalled)
#   interrupt the supervisor gets SIGINT while slot 1 hangs: the job cannot save (SIGUSR1), so
#            after --stop-grace it is terminated (SIGTERM, which srun turns into cancelling its
#            step), and no rank is left running
#   held     another job holds run.dir/train.lock: the supervisor waits --stop-grace for it and
#            stops (exit 1) naming the holder, with no attempt started (a crashed first attempt
#            would have cost a healthy machine)
#   slow     slot 3 sleeps 300 ms a step from step 4: detect names it, the job saves and stops
#   nan      a transient NaN loss at step 7: restart on the same machines
#   three    a crash, a NaN and a hang in one run, with --max-evictions 2
#   hold     --max-evictions 0: the crash's removal is held back, its repeat is the second signal
#   repeat   a NaN that comes back at the same step: the job is stopped with a report (exit 1)
# With a fifth argument `srun` the job is launched by `srun -O --mpi=pmix -n {np}` on a running
# Slurm cluster instead (labelled slurm; skips, exit 77, when none answers or srun has no PMIx).
# Usage: supervise_test.sh <mpirun> <bin dir> <source dir> <case> [srun]
set -euo pipefail
MPIRUN=$1
BIN=$2
SRC=$3
CASE=$4
LAUNCHER=${5:-mpirun}
if [ "$LAUNCHER" = srun ]; then
  if [ -z "${SLURM_CONF:-}" ] && [ -f "${SLURM_LOCAL_DIR:-/tmp/ms-slurm}/slurm.conf" ]; then
    export SLURM_CONF=${SLURM_LOCAL_DIR:-/tmp/ms-slurm}/slurm.conf
  fi
  command -v srun > /dev/null && sinfo -h > /dev/null 2>&1 || { echo "SKIP: no Slurm cluster answers"; exit 77; }
  srun --mpi=list 2>&1 | grep -qw pmix || { echo "SKIP: srun offers no PMIx"; exit 77; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL [$CASE]: $*"; exit 1; }
source "$(dirname "$0")/lib.sh"

shakespeare_plan 32 1024 16
steps=30
launch=("$MPIRUN" --oversubscribe -np '{np}')
[ "$LAUNCHER" = srun ] && launch=(srun -O --mpi=pmix -n '{np}')
job=("${launch[@]}" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml"
     "${TINY_MODEL[@]}" --set data.plan="$work/s32.plan" --set model.max_seq_len=32
     --set train.seq_len=32 --set train.steps=$steps --set train.global_batch=12
     --set train.micro_batch=1 --set train.eval_every=0 --set train.log_every=1
     --set train.mfu_peak_gflops=1 --set optim.warmup_steps=1 --set checkpoint.every=2
     --set telemetry.every_s=0.2 --set telemetry.trace=false)
hang_timeout=4 stop_grace=30
[ "$CASE" = stall ] && hang_timeout=8
[ "$CASE" = interrupt ] && hang_timeout=60 stop_grace=2
[ "$CASE" = held ] && stop_grace=2
supervise=("$BIN/ms-diagnose" supervise --ranks 4 --hang-timeout $hang_timeout --start-timeout 60
           --detect-window 2 --detect-period 2 --detect-every 1 --stop-grace $stop_grace --quiet)

# The last loss recorded for every step of rank 0 ("step loss" lines): after a restart the
# resumed run's records come later in the file and win.
final_losses() {
  sed -n 's/.*"kind":"step".*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' \
    "$1/telemetry/rank-00000.jsonl" | awk '{ loss[$1] = $2 } END { for (s in loss) print s, loss[s] }' |
    sort -n
}

# run_case <name> <exit status expected> <supervise options...> -- <ms-train --set values...>
run_case() {
  local name=$1 expect=$2
  shift 2
  local opts=() sets=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  for s in "$@"; do sets+=(--set "$s"); done
  local rc=0
  timeout -k 5 240 "${supervise[@]}" "${opts[@]}" -- "${job[@]}" --set run.dir="$work/$name" \
    "${sets[@]}" > "$work/$name.out" 2>&1 || rc=$?
  [ "$rc" -eq "$expect" ] || { tail -n 40 "$work/$name.out"; fail "$name: exit $rc, expected $expect"; }
  events="$work/$name/supervise/events.jsonl"
  [ -f "$events" ] || fail "$name: no event log"
}

same_losses() {  # same_losses <run name>: the final losses equal the uninterrupted run's
  final_losses "$work/$1" > "$work/$1.losses"
  [ "$(wc -l < "$work/$1.losses")" -eq "$steps" ] || fail "$1: $(wc -l < "$work/$1.losses") steps recorded, not $steps"
  paste "$work/base.losses" "$work/$1.losses" | awk -v name="$1" '
    $1 != $3 { print name ": step " $1 " against " $3; bad = 1 }
    { d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
      if (r > 1e-5) { print name ": step " $1 " loss " $4 " against " $2; bad = 1 } }
    END { exit bad }' || fail "$1: the losses differ from the uninterrupted run's"
}

count() { grep -c "\"event\":\"$1\"" "$events" || true; }
expect_count() {  # expect_count <event> <n>
  [ "$(count "$1")" -eq "$2" ] || { cat "$events"; fail "$CASE: $(count "$1") $1 events, expected $2"; }
}
expect_fault() {  # expect_fault <kind> [machine]: some fault event of that kind (on that machine)
  grep '"event":"fault"' "$events" | grep -q "\"kind\":\"$1\"${2:+.*\"machine\":\"$2\"}" ||
    { cat "$events"; fail "$CASE: no $1 fault${2:+ on $2}"; }
}
expect_excluded() {  # expect_excluded <slots...>: exactly these slots are excluded
  local got want
  got=$(cut -d: -f1 "$work/$CASE/supervise/excluded" | sort | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sed '/^$/d' | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "$CASE: excluded [$got], expected [$want]"
}
expect_outcome() {  # expect_outcome <outcome>: the end event's
  grep '"event":"end"' "$events" | grep -q "\"outcome\":\"$1\"" ||
    { cat "$events"; fail "$CASE: the end is not '$1'"; }
}
expect_completed() {
  expect_outcome completed
  grep '"event":"end"' "$events" | grep -Eq '"ettr":0\.[0-9]' || fail "no ETTR in the end event"
  grep -q "supervise: completed: $steps steps" "$work/$CASE.out" || fail "no completion line"
  grep -Eq "ETTR [0-9.]+" "$work/$CASE.out" || fail "no ETTR line"
}

run_case base 0 --
final_losses "$work/base" > "$work/base.losses"
[ "$(count fault)" -eq 0 ] || fail "the uninterrupted run had faults"

case "$CASE" in
  kill)
    run_case kill 0 -- debug.kill_rank=2 debug.kill_step=5
    expect_fault crash slot2; expect_count evict 1; expect_count restart 1; expect_excluded slot2
    grep '"event":"restart"' "$events" | grep -q '"ranks":3' || fail "the restart is not on 3 ranks"
    [ -s "$work/kill/supervise/incident-1/output-tail.txt" ] || fail "no output kept as evidence"
    same_losses kill; expect_completed ;;
  hang)
    run_case hang 0 -- debug.hang_rank=1 debug.hang_step=6
    expect_fault hang slot1; expect_count evict 1; expect_excluded slot1
    ls "$work/hang/supervise/incident-1/inflight/"rank-*.json > /dev/null ||
      fail "the watchdog's in-flight reports were not kept"
    grep -q "rank 1 \[not-waiting\]" "$work/hang/supervise/incident-1/evidence.json" ||
      fail "no hang analysis in the evidence"
    same_losses hang; expect_completed ;;
  stall)
    run_case stall 0 -- debug.slow_rank=2 debug.slow_ms=300 debug.slow_from_step=5 \
      debug.hang_rank=2 debug.hang_step=6
    expect_fault hang slot2; expect_count fault 1; expect_count evict 1; expect_excluded slot2
    same_losses stall; expect_completed ;;
  interrupt)
    "${supervise[@]}" -- "${job[@]}" --set run.dir="$work/interrupt" --set debug.hang_rank=1 \
      --set debug.hang_step=6 > "$work/interrupt.out" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      grep -qs "hangs at step" "$work/interrupt/supervise/attempt-1.log" && break
      sleep 0.2
    done
    grep -qs "hangs at step" "$work/interrupt/supervise/attempt-1.log" || fail "no hang began"
    kill -INT "$pid"
    rc=0; wait "$pid" || rc=$?
    [ "$rc" -eq 1 ] || { tail -n 20 "$work/interrupt.out"; fail "interrupt: exit $rc, expected 1"; }
    events="$work/interrupt/supervise/events.jsonl"
    expect_outcome interrupted
    expect_count fault 0 ;;
  held)
    mkdir -p "$work/held"
    exec 9> "$work/held/train.lock"
    flock -n 9 || fail "cannot take the lock for the test"
    echo "pid $$ on host test" >&9
    rc=0
    "${supervise[@]}" -- "${job[@]}" --set run.dir="$work/held" > "$work/held.out" 2>&1 9>&- ||
      rc=$?
    exec 9>&-
    [ "$rc" -eq 1 ] || { tail -n 20 "$work/held.out"; fail "held: exit $rc, expected 1"; }
    grep -q "still in use after 2.0s: .*held by pid $$ on host test" "$work/held.out" ||
      { tail -n 20 "$work/held.out"; fail "the stop does not name the holder"; }
    events="$work/held/supervise/events.jsonl"
    expect_count start 0; expect_count fault 0
    expect_outcome stopped ;;
  slow)
    run_case slow 0 -- debug.slow_rank=3 debug.slow_ms=300 debug.slow_from_step=4
    expect_fault slow slot3; expect_count evict 1; expect_excluded slot3
    grep -q '"detect"' "$work/slow/supervise/incident-1/evidence.json" || fail "no detect verdict kept"
    same_losses slow; expect_completed ;;
  nan)
    run_case nan 0 -- debug.nan_rank=0 debug.nan_step=7
    expect_fault numerical; expect_count evict 0; expect_count restart 1; expect_excluded
    same_losses nan; expect_completed ;;
  three)
    run_case three 0 --max-evictions 2 -- debug.kill_rank=1 debug.kill_step=4 debug.nan_rank=0 \
      debug.nan_step=10 debug.hang_rank=2 debug.hang_step=16
    expect_fault crash slot1; expect_fault numerical; expect_fault hang slot2
    expect_count fault 3; expect_count restart 3; expect_excluded slot1 slot2
    same_losses three; expect_completed
    [ "$(grep '"event":"end"' "$events" | grep -o '"kind"' | wc -l)" -eq 3 ] ||
      fail "the end event does not list three incidents" ;;
  hold)
    run_case hold 0 --max-evictions 0 -- debug.kill_rank=2 debug.kill_step=5
    expect_count hold 1; expect_count evict 1; expect_count fault 2; expect_excluded slot2
    grep '"event":"evict"' "$events" | grep -q "again after a restart" || fail "no second-signal reason"
    same_losses hold; expect_completed ;;
  repeat)
    run_case repeat 1 -- debug.nan_rank=1 debug.nan_step=6 debug.nan_repeat=true
    expect_count fault 2; expect_count stop 1; expect_count evict 0
    grep '"event":"stop"' "$events" | grep -q "code or data" || fail "the stop does not say why"
    expect_outcome stopped
    grep -q "supervise: stopped" "$work/repeat.out" || fail "no stop line" ;;
  *) fail "unknown case" ;;
esac
pgrep -f "$work" > /dev/null && fail "processes of the job are left running"
echo "ms-diagnose supervise [$CASE, $LAUNCHER]: passed"
