#!/usr/bin/env bash
# Crafted inputs a hostile user tries (issue 40, items 4 and 5): files that are not regular
# (/dev/zero, a FIFO with no writer, a directory) where a config or cluster file belongs,
# counts that would size allocations past the machine, and numbers that are not finite, out
# of range, repeated or overflowing. Each must end within 60 s with exit 1 (a bad value in a
# file) or 2 (a bad flag), naming the file, key or flag, and leave no process behind.
# Usage: crafted_inputs_test.sh <bin dir> <source dir>
set -uo pipefail
BIN=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
passed=0
failed=0

# refused <description> <expected exit> <fixed string the output must hold> -- <command...>
refused() {
  local what=$1 want_rc=$2 want=$3
  shift 4
  local out rc
  out=$(timeout -k 5 60 "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: $what: exit $rc, expected $want_rc"; echo "$out" | head -20
    failed=$((failed + 1)); return
  fi
  if ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $what: output does not hold '$want'"; echo "$out" | head -20
    failed=$((failed + 1)); return
  fi
  echo "ok: $what"
  passed=$((passed + 1))
}

CFG=$SRC/configs/tiny-dense.yaml
mkfifo fifo.yaml

# ---- item 4: bounded reads; a FIFO never blocks the open ----
refused "a config from /dev/zero" 1 "config file '/dev/zero' is a character device" \
  -- "$BIN/ms-train" --config /dev/zero --dry-run
refused "a config that is a FIFO without a writer" 1 "config file 'fifo.yaml' is a FIFO" \
  -- "$BIN/ms-train" --config fifo.yaml --dry-run
refused "a config that is a directory" 2 "File is actually a directory: $WORK" \
  -- "$BIN/ms-train" --config "$WORK" --dry-run
truncate -s 1T sparse.yaml
refused "a config of a terabyte" 1 "config file 'sparse.yaml' is 1099511627776 bytes, above the limit" \
  -- "$BIN/ms-train" --config sparse.yaml --dry-run
refused "a cluster file from /dev/zero" 1 "cluster file '/dev/zero' is a character device" \
  -- "$BIN/ms-train" plan --config "$CFG" --cluster /dev/zero
refused "a cluster file that is a FIFO" 1 "cluster file 'fifo.yaml' is a FIFO" \
  -- "$BIN/ms-train" plan --config "$CFG" --cluster fifo.yaml
refused "a mixture config that is a FIFO" 1 "config file 'fifo.yaml' is a FIFO" \
  -- "$BIN/ms-data" plan --config fifo.yaml --output x.plan
refused "a plan that is a FIFO" 1 "plan 'fifo.yaml' is a FIFO, not a regular file" \
  -- "$BIN/ms-data" dump-plan fifo.yaml

# ---- item 4: counts checked before they size an allocation ----
refused "supervise --ranks 2000000000" 1 "--ranks 2000000000 is more rank slots than this machine can run" \
  -- "$BIN/ms-diagnose" supervise --ranks 2000000000 -- mpirun -np '{np}' "$BIN/ms-train" --config "$CFG"
refused "reshard --to dp=1000000000" 1 "--to pp * dp * tp (1 * 1000000000 * 1) = 1000000000" \
  -- "$BIN/ms-ckpt" reshard "$WORK/none" --to dp=1000000000 --output out
head -c 20000 "$SRC/data/corpus/tinyshakespeare.txt" > small.txt
"$BIN/ms-data" build -i small.txt \
  --doc-separator blank-line -t "$SRC/data/tokenizers/gpt2/tokenizer.json" -o small \
  --no-progress > /dev/null 2>&1 || { echo "FAIL: building the small dataset"; exit 1; }
cat > mix.yaml <<YAML
seq_len: 32
total_samples: 4611686018427387904
validation: {fraction: 0, samples: 0}
sources:
  - {name: small, prefix: $WORK/small, weight: 1.0}
YAML
refused "ms-data plan total_samples 2^62" 1 "total_samples 4611686018427387904: the plan's sample table needs" \
  -- "$BIN/ms-data" plan --config mix.yaml --output big.plan
test ! -e big.plan || { echo "FAIL: a refused plan left a file"; failed=$((failed + 1)); }

# ---- item 5: numbers checked where they enter ----
mkdir -p telemetry
refused "detect --threshold nan" 2 "--threshold: must be a finite number above 0 (got nan)" \
  -- "$BIN/ms-diagnose" detect telemetry --threshold nan
refused "detect --spread-floor -1" 2 "--spread-floor: must be a finite number at least 0 (got -1)" \
  -- "$BIN/ms-diagnose" detect telemetry --spread-floor -1
refused "supervise --hang-timeout inf" 2 "--hang-timeout: must be a finite number above 0 (got inf)" \
  -- "$BIN/ms-diagnose" supervise --ranks 2 --hang-timeout inf -- mpirun -np '{np}' "$BIN/ms-train"
refused "reshard --to tp=2,tp=4" 1 "--to: key 'tp' is given twice in 'tp=2,tp=4'" \
  -- "$BIN/ms-ckpt" reshard "$WORK/none" --to tp=2,tp=4 --output out
refused "reshard --to ep=-3" 1 "--to ep=-3: expected a non-negative whole number" \
  -- "$BIN/ms-ckpt" reshard "$WORK/none" --to ep=-3 --output out
refused "parallel.cp that overflows" 1 "2 * parallel.cp (2 * 4611686018427387904) overflows 64 bits" \
  -- "$BIN/ms-train" --config "$CFG" --set parallel.cp=4611686018427387904 --dry-run
sed 's/^  memory_bandwidth_gbs: .*/&\n  measured_ops: {"gemm 8x8x8": .nan}/' \
  "$SRC/configs/clusters/cpu-2core.yaml" > nan-op.yaml
grep -q 'measured_ops: {"gemm' nan-op.yaml || { echo "FAIL: crafting nan-op.yaml"; exit 1; }
refused "a cluster file with a NaN op time" 1 "nan-op.yaml: device.measured_ops.gemm 8x8x8 must be a positive, finite number" \
  -- "$BIN/ms-train" plan --config "$CFG" --cluster nan-op.yaml
refused "a model too large for the planner" 1 "above the 9.01e+15 the planner sizes" \
  -- "$BIN/ms-train" plan --config "$CFG" --cluster "$SRC/configs/clusters/cpu-2core.yaml" \
     --set model.d_model=1099511627776 --set model.d_ff=4398046511104

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
