# shellcheck shell=bash
# Sourced by the batch scripts in this folder: how they start the toolkit's binaries inside a
# Slurm allocation, whichever launcher the cluster offers.
#
#   ms_launch <binary> [args...]      one process per Slurm task (all of the job's tasks)
#   ms_launch_stoppable <binary> ...  the same, in the background, with the batch shell
#                                     forwarding a stop request to every rank (see below)
#   ms_launcher                       prints "srun" or "mpirun", the launcher ms_launch uses
#
# srun --mpi=pmix is used where the cluster's Slurm has the PMIx plugin (`srun --mpi=list`
# names it) and the toolkit's MPI was built with PMIx (Debian's OpenMPI is): srun starts the
# ranks itself and they wire up through Slurm. Elsewhere mpirun runs inside the allocation: an
# mpirun built with Slurm support reads the node list and task count from the job's environment
# and starts its daemons with srun, so neither -np nor a hostfile is needed. MS_LAUNCHER=srun or
# MS_LAUNCHER=mpirun forces one; MS_MPIRUN_ARGS adds options to mpirun (as root in a container:
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment).
#
# Where the binaries are: MS_BIN (default build/release/bin of the directory sbatch was run
# from, as the README builds them). Slurm copies a batch script before running it, so these
# scripts find the checkout through MS_SRC (default: that directory) rather than through $0.

MS_SRC=${MS_SRC:-${SLURM_SUBMIT_DIR:-$PWD}}
MS_BIN=${MS_BIN:-$MS_SRC/build/release/bin}
# One BLAS thread per CPU Slurm gave the task, so ranks sharing a node do not oversubscribe it.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}

ms_launcher() {
  if [ -n "${MS_LAUNCHER:-}" ]; then
    echo "$MS_LAUNCHER"
  elif srun --mpi=list 2>&1 | grep -qw pmix; then
    echo srun
  else
    echo mpirun
  fi
}

# Sets MS_LAUNCH_CMD to the launcher command line for <binary> [args...].
ms_launch_command() {
  local binary=$1 extra=()
  shift
  case "$(ms_launcher)" in
    # --kill-on-bad-exit: a rank that fails ends the step instead of leaving its peers waiting.
    srun) MS_LAUNCH_CMD=(srun --mpi=pmix --kill-on-bad-exit=1 "$MS_BIN/$binary" "$@") ;;
    # MS_MPIRUN_ARGS is a list of options, split on blanks.
    mpirun) read -r -a extra <<< "${MS_MPIRUN_ARGS:-}"
            MS_LAUNCH_CMD=(mpirun "${extra[@]}" "$MS_BIN/$binary" "$@") ;;
    *) echo "launch.sh: MS_LAUNCHER must be srun or mpirun, not '$(ms_launcher)'" >&2; return 2 ;;
  esac
}

ms_launch() {
  ms_launch_command "$@" || return
  "${MS_LAUNCH_CMD[@]}"
}

# A stop request reaching the batch shell (the lead-time signal of `#SBATCH --signal=B:USR1@T`,
# or SIGTERM when the job is cancelled, requeued or preempted) is passed to the ranks as
# SIGUSR1: srun and mpirun both forward SIGUSR1 to every rank unchanged, and ms-train takes it,
# like SIGTERM, as "finish this step, save a checkpoint, exit 0". (mpirun would turn a SIGTERM
# of its own into killing the job, which is why SIGUSR1 is sent.) MS_STOP_SIGNAL names the
# signal afterwards (USR1 or TERM; empty when none came), so a script can tell a lead-time
# warning, after which it may requeue itself, from Slurm ending the job.
MS_STOP_SIGNAL=
MS_STOPS_FORWARDED=0
# shellcheck disable=SC2034  # read by the scripts that source this file
ms_forward_stop() {
  MS_STOP_SIGNAL=$1
  MS_STOPS_FORWARDED=$((MS_STOPS_FORWARDED + 1))
  echo "$(date -u +%FT%TZ) batch shell: SIG$1, forwarding SIGUSR1 to the ranks"
  kill -USR1 "$MS_LAUNCH_PID" 2> /dev/null || true
}

ms_launch_stoppable() {
  ms_launch_command "$@" || return
  trap 'ms_forward_stop USR1' USR1
  trap 'ms_forward_stop TERM' TERM
  # The launcher itself in the background (not a subshell around it), so the signal reaches it.
  "${MS_LAUNCH_CMD[@]}" &
  MS_LAUNCH_PID=$!
  # A trapped signal makes `wait` return early (128 + the signal) with the launcher still
  # running; wait again until a wait ends without a trap, which is the launcher's own status.
  local status forwarded
  while true; do
    forwarded=$MS_STOPS_FORWARDED
    status=0
    wait "$MS_LAUNCH_PID" || status=$?
    [ "$forwarded" -ne "$MS_STOPS_FORWARDED" ] || break
  done
  trap - USR1 TERM
  return "$status"
}
