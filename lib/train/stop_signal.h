// SIGINT / SIGTERM handling for training (and SIGUSR1 / SIGUSR2, turned into SIGTERM): the
// handler only sets a flag; the trainer reads it at each step boundary and the ranks agree
// (allreduce max) to stop after the same step, so a signal to any one rank stops the whole job
// cleanly.
#pragma once

namespace ms::train {

// Installs the handlers for SIGINT and SIGTERM (replacing the default terminate action).
void install_stop_handlers();
// Makes SIGUSR1 and SIGUSR2 stop training like SIGTERM (the trainer saves a checkpoint and
// exits 0). They are what batch systems send ahead of a time limit or preemption when asked
// (Slurm's `--signal=USR1@120`), and what mpirun forwards to its ranks unchanged, whereas mpirun
// turns its own SIGTERM into a kill of the job. The handler re-raises SIGTERM, so before
// install_stop_handlers a SIGUSR ends the process as SIGTERM would. ms-train installs it at
// start-up.
void treat_user_signals_as_term();
// True once SIGINT or SIGTERM arrived since install_stop_handlers().
bool stop_requested();
// The signal that arrived (0 when none).
int stop_signal();
// Clears the flag (tests).
void clear_stop_request();

}  // namespace ms::train
