#!/usr/bin/env bash
# The binaries as a user meets them from a shell: help, version, exit codes, error prefixes and
# config errors. Usage: cli_test.sh <bin dir> <source dir>
set -uo pipefail
BIN=$1
SRC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

check() {  # check <description> <expected exit> <pattern on stdout+stderr or ""> -- <command...>
  local what=$1 want_rc=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: $what: exit $rc, expected $want_rc"; echo "$out" | head -20; failed=$((failed + 1)); return
  fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: output does not match /$pattern/"; echo "$out" | head -20; failed=$((failed + 1)); return
  fi
  echo "ok: $what"
  passed=$((passed + 1))
}

for tool in ms-data ms-train ms-ckpt ms-infer ms-diagnose; do
  check "$tool --help" 0 "Usage: .*$tool" -- "$BIN/$tool" --help
  check "$tool --version" 0 "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-z-]+\)" -- "$BIN/$tool" --version
  check "$tool rejects an unknown option" 2 "^$tool: error: " -- "$BIN/$tool" --no-such-option
  check "$tool rejects a bad log level" 2 "^$tool: error: unknown log level" -- "$BIN/$tool" --log-level loud
done
check "ms-data with no subcommand prints help" 0 "Usage:" -- "$BIN/ms-data"
for tool in ms-data ms-train ms-ckpt ms-infer ms-diagnose; do
  check "$tool: an unknown subcommand with --help is an error" 2 \
    "^$tool: error: unknown subcommand 'shrink'" -- "$BIN/$tool" shrink --help
done
check "an unknown subcommand after an option's value is named" 2 \
  "^ms-ckpt: error: unknown subcommand 'shrink' \(ms-ckpt has: .*prune" \
  -- "$BIN/ms-ckpt" --log-level warn shrink
check "a subcommand's --help still works" 0 "Usage: .*ms-ckpt prune" \
  -- "$BIN/ms-ckpt" --log-level warn prune --help
check "ms-train --help describes pipeline, expert and context parallelism" 0 \
  "pipeline stages.*expert parallelism.*context parallelism" -- "$BIN/ms-train" --help
check "a malformed SLURM_NTASKS is named" 1 "^ms-train: error: SLURM_NTASKS='4x' is not a number of ranks" \
  -- env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE SLURM_NTASKS=4x "$BIN/ms-train" \
     --config "$SRC/configs/tiny-cpu.yaml" --dry-run
check "a rank count from SLURM_NTASKS that fits no layout says where it came from" 1 \
  "the 3 ranks are SLURM_NTASKS's" \
  -- env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE SLURM_NTASKS=3 "$BIN/ms-train" \
     --config "$SRC/configs/tiny-cpu.yaml" --set parallel.tp=2 --dry-run
check "--dry-run at bf16 counts the backend's operand copies in the peak" 0 \
  "precision bf16; expected peak memory per model rank 294\.6 MiB .*bf16 operand copies 110\.9\)" \
  -- "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --set train.precision=bf16 --dry-run
check "--dry-run at f32 has no operand copies" 0 \
  "precision f32; expected peak memory per model rank 183\.7 MiB .*activations 105\.8\)" \
  -- "$BIN/ms-train" --config "$SRC/configs/tiny-dense.yaml" --dry-run
check "2 * parallel.cp that overflows says so, with its operands" 1 \
  "2 \* parallel\.cp \(2 \* 4611686018427387904\) overflows 64 bits" \
  -- "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set parallel.cp=4611686018427387904 --dry-run

cat >"$WORK/typo.yaml" <<'YAML'
run: {name: typo, seed: 7}
optim:
  lr: 3.0e-4
  wieght_decay: 0.1
YAML
check "misspelled config key names file:line:column and a suggestion" 1 \
  "^ms-train: error: .*typo\.yaml:4:3: .*wieght_decay.*did you mean 'optim\.weight_decay'" \
  -- "$BIN/ms-train" --config "$WORK/typo.yaml" --dry-run
check "missing config file is a usage error" 2 "^ms-train: error: " \
  -- "$BIN/ms-train" --config "$WORK/none.yaml" --dry-run
check "--set with a wrong type is refused" 1 "train\.steps.*integer" \
  -- "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set train.steps=many --dry-run
check "--dry-run prints the resolved config" 0 "steps: 7" \
  -- "$BIN/ms-train" --config "$SRC/configs/tiny-cpu.yaml" --set train.steps=7 --dry-run
check "--config-help lists every key" 0 "optim\.lr" -- "$BIN/ms-train" --config-help
check "ms-diagnose info --json" 0 '"ranks": *\[' -- "$BIN/ms-diagnose" info --json
check "ms-diagnose info table" 0 "rank +host" -- "$BIN/ms-diagnose" info

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
