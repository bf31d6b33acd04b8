# Helpers shared by the parallel-layout e2e scripts (train_tp, train_pp, train_ep, train_cp), sourced
# after MPIRUN, BIN, SRC, work, fail and the `base` array of --set arguments are defined. Every
# run uses configs/tiny-dense.yaml shrunk by `base`.

# train <ranks> <run dir> [extra args...]: one ms-train run under mpirun, its output in
# <run dir>.log (printed when it fails).
train() {
  local np=$1 dir=$2
  shift 2
  "$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    "${base[@]}" --set run.dir="$dir" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
}

# losses <run dir>: "step loss" and "step grad_norm" lines of rank 0's telemetry.
losses() {
  sed -n 's/.*"kind":"step".*"step":\([0-9]*\),"loss":\([^,]*\),"grad_norm":\([^,]*\),.*/\1 \2\n\1 \3/p' \
    "$1/telemetry/rank-00000.jsonl"
}

# close <run dir> <reference run dir> <first step>: every step's loss and gradient norm (the
# global gradient's, so a wrong gradient anywhere shows at step 1) within 1e-5 relative, and,
# when the runs evaluated, the last validation loss too.
close() {
  local got want got_eval want_eval
  got=$(losses "$1" | awk -v s="$3" '$1 >= s')
  want=$(losses "$2" | awk -v s="$3" '$1 >= s')
  [ -n "$got" ] || fail "no losses in $1"
  got_eval=$(sed -n 's/.*eval step [0-9]* | val_loss //p' "$1.log" | tail -1)
  want_eval=$(sed -n 's/.*eval step [0-9]* | val_loss //p' "$2.log" | tail -1)
  if [ -n "$got_eval$want_eval" ]; then
    got+=$'\n'"9999 $got_eval"
    want+=$'\n'"9999 $want_eval"
  fi
  paste <(echo "$got") <(echo "$want") | awk -v what="$1" '
    $1 != $3 || $2 == "" { print "step mismatch in " what; bad = 1; exit }
    { d = $2 - $4; if (d < 0) d = -d; r = $4 < 0 ? -$4 : $4
      if (d > 1e-5 * r) { printf "%s step %d: loss or grad_norm %.10f vs %.10f\n", what, $1, $2, $4; bad = 1 } }
    END { exit bad }' || fail "$1 is not within 1e-5 of $2"
}

# bitwise <run dir> <run dir> <what>: the two runs logged bitwise the same step records (up to
# the learning rate, which follows from the step).
bitwise() {
  cmp <(grep '"kind":"step"' "$1/telemetry/rank-00000.jsonl" | sed 's/.*"step"/"step"/; s/,"lr".*//') \
      <(grep '"kind":"step"' "$2/telemetry/rank-00000.jsonl" | sed 's/.*"step"/"step"/; s/,"lr".*//') ||
    fail "$3"
}

# refused <ranks> <text the message must hold> [extra args...]: exit 1 before any step, with
# the text in the message.
refused() {
  local np=$1 want=$2 status=0 out
  shift 2
  out=$("$MPIRUN" --oversubscribe -np "$np" "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" \
    "${base[@]}" --set run.dir="$work/bad" "$@" 2>&1) || status=$?
  [ "$status" -eq 1 ] || { echo "$out"; fail "$*: exit $status"; }
  grep -qF -- "$want" <<<"$out" || { echo "$out"; fail "$*: the refusal lacks '$want'"; }
  ! grep -q "step 1/" <<<"$out" || fail "a step ran despite $*"
}

# fails_together <ranks> <failing rank> [extra args...]: that rank throws mid-run; every rank
# must end non-zero within 30 s with the failing rank's message shown.
fails_together() {
  local np=$1 rank=$2 status=0 start out
  shift 2
  start=$(date +%s)
  out=$(MS_TEST_FAIL_RANK="$rank:throw" timeout 60 "$MPIRUN" --oversubscribe -np "$np" \
    "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" "${base[@]}" \
    --set run.dir="$work/fail" "$@" 2>&1) || status=$?
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { echo "$out"; fail "a failing rank: exit $status"; }
  [ $(($(date +%s) - start)) -lt 30 ] || fail "ranks took too long to stop after rank $rank failed"
  grep -q "rank $rank: " <<<"$out" || { echo "$out"; fail "the failing rank's message is not shown"; }
}
