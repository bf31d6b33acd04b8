#!/usr/bin/env bash
# The training save path of ms-ckpt (lib/ckpt Checkpointer, load_tensors, reshard_checkpoint) on
# about 1 GiB of f32 state, against the raw sequential disk bandwidth measured in the same run:
# `dd bs=1M conv=fsync` for writes (the median of three runs; `dd bs=8M oflag=direct` beside it,
# as the writer bypasses the page cache too), `dd bs=1M iflag=direct` after dropping the page
# cache for reads. ckpt_save_bench (built with -DMS_BUILD_BENCH=ON) runs under mpirun with 1 and 2 ranks
# (the rank count is the data-parallel size; weights replicated, Adam moments ZeRO-1):
#   save     sync save, then async copy-on-write saves while the caller runs "training steps"
#            (sgemms, then an update that rewrites the whole state) and polls: stall (caller
#            blocked) against the time to commit and the step time, first save and later ones,
#            and the step slowdown while writing, unpaced and paced at a quarter of dd's rate;
#            on 1 rank once more with the data files written through the page cache
#   load     cold load into the same layout and into the other one (dp=2 -> 1, dp=1 -> 2),
#            each against a cold dd iflag=direct read of the same data files just before it
#   reshard  offline, dp=2 -> dp=1,zero=0 on 1 process and dp=1 -> dp=2,zero=1 on 2 processes
# Pages are dropped before every measurement when run as root (/proc/sys/vm/drop_caches);
# otherwise rows say "warm". Prints one markdown table (docs/bench/ckpt.md).
# Usage: ckpt_save_bench.sh <bin dir> [parent of the work dir, default /tmp] [state MiB, 1024]
set -euo pipefail
BIN=${1:?usage: ckpt_save_bench.sh <bin dir> [work parent] [state MiB]}
PARENT=${2:-/tmp}
MIB=${3:-1024}
[ -x "$BIN/ckpt_save_bench" ] || { echo "no $BIN/ckpt_save_bench: configure with -DMS_BUILD_BENCH=ON and build it"; exit 1; }
WORK=$(mktemp -d "$PARENT/ms_ckpt_save_bench_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# Disk: at most three checkpoints exist at once (two saves and a reshard output), plus slack.
need_kib=$((4 * MIB * 1024))
avail_kib=$(df -k --output=avail "$WORK" | tail -1)
if [ "$avail_kib" -lt "$need_kib" ]; then
  echo "refusing: the benchmark needs $((need_kib / 1024)) MiB free in $PARENT, $((avail_kib / 1024)) MiB are" >&2
  exit 1
fi
# Memory: two ranks each hold the weights, half the moments and a staging copy of their writes.
need_mem_kib=$((3 * MIB * 1024))
avail_mem_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
if [ "$avail_mem_kib" -lt "$need_mem_kib" ]; then
  echo "refusing: the benchmark needs about $((need_mem_kib / 1024)) MiB of free memory, $((avail_mem_kib / 1024)) MiB are available" >&2
  exit 1
fi

drop() { sync; if [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo cold; else echo warm; fi; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
rate() { echo "scale=1; $1 / $2" | bc -l; }

echo "# ckpt_save_bench.sh: $(uname -n), $(nproc --all) CPUs, state $MIB MiB f32, work dir on $(df --output=source "$WORK" | tail -1)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# The disk of a shared VM varies by a third from one minute to the next: the write baseline is
# the median of three dd runs, each printed.
dd_ws=()
for _ in 1 2 3; do
  drop > /dev/null
  dd_ws+=("$(secs dd if=/dev/zero of="$WORK/dd.bin" bs=1M count="$MIB" conv=fsync)")
  [ ${#dd_ws[@]} -eq 3 ] || rm -f "$WORK/dd.bin"
done
dd_w=$(printf '%s\n' "${dd_ws[@]}" | sort -g | sed -n 2p)
# The same write with direct I/O, as the checkpoint writer does where the filesystem allows.
drop > /dev/null
dd_wd=$(secs dd if=/dev/zero of="$WORK/dd-direct.bin" bs=8M count="$((MIB / 8))" oflag=direct conv=fsync)
rm -f "$WORK/dd-direct.bin"
cache=$(drop)
dd_r=$(secs dd if="$WORK/dd.bin" of=/dev/null bs=1M iflag=direct)
rm -f "$WORK/dd.bin"
W=$(rate "$MIB" "$dd_w")
R=$(rate "$MIB" "$dd_r")
echo "| case | ranks | seconds | MiB/s | vs dd | detail |"
echo "|---|---:|---:|---:|---:|---|"
printf "| dd write bs=1M conv=fsync | 1 | %.2f | %s | 1.00x | raw sequential write, %s MiB; median of 3 runs: %s s |\n" \
  "$dd_w" "$W" "$MIB" "$(printf '%.2f ' "${dd_ws[@]}")"
printf "| dd write bs=8M oflag=direct conv=fsync | 1 | %.2f | %s | %.2fx | the same write bypassing the page cache |\n" \
  "$dd_wd" "$(rate "$MIB" "$dd_wd")" "$(echo "$dd_w / $dd_wd" | bc -l)"
printf "| dd read bs=1M iflag=direct (%s) | 1 | %.2f | %s | 1.00x | raw sequential read |\n" "$cache" "$dd_r" "$R"

bench() {  # bench <ranks> <mode> <args...>
  local np=$1
  shift
  mpirun --oversubscribe --bind-to none -np "$np" "$BIN/ckpt_save_bench" "$@" \
    --state-mib "$MIB" --dd-write-mibs "$W" --dd-read-mibs "$R"
}
step="step-00000002"  # the async save of `ckpt_save_bench save`
paced=$(echo "scale=0; $W * 1.048576 / 4" | bc -l)  # MB/s, a quarter of dd's MiB/s
bench 1 save --dir "$WORK/dp1" --paced-mbps "$paced"
bench 1 save --dir "$WORK/dp1-page-cache" --paced-mbps "$paced" --page-cache
rm -rf "$WORK/dp1-page-cache"
bench 2 save --dir "$WORK/dp2" --paced-mbps "$paced"
# Each load is compared with a cold `dd iflag=direct` read of the same data files just before
# it: this disk's speed drifts between the start of the run and its loads.
load() {  # load <ranks> <step dir>
  local t=0 f
  for f in "$2"/*.data; do
    drop > /dev/null
    t=$(echo "$t + $(secs dd if="$f" of=/dev/null bs=1M iflag=direct)" | bc -l)
  done
  local mibs
  mibs=$(echo "scale=1; $(stat -c %s "$2"/*.data | paste -sd+ | bc) / 1048576 / $t" | bc -l)
  echo "# dd iflag=direct of $(basename "$(dirname "$(dirname "$2")")")'s data files just before the next load: $mibs MiB/s"
  mpirun --oversubscribe --bind-to none -np "$1" "$BIN/ckpt_save_bench" load --ckpt "$2" \
    --state-mib "$MIB" --dd-write-mibs "$W" --dd-read-mibs "$mibs"
}
load 1 "$WORK/dp1/async/$step"
load 2 "$WORK/dp2/async/$step"
load 1 "$WORK/dp2/async/$step"
load 2 "$WORK/dp1/async/$step"
bench 1 reshard --ckpt "$WORK/dp2/async/$step" --to dp=1,zero=0 --out "$WORK/rs1"
rm -rf "$WORK/rs1"
bench 2 reshard --ckpt "$WORK/dp1/async/$step" --to dp=2,zero=1 --out "$WORK/rs2"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
