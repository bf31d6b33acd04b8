// SIGINT / SIGTERM handling for training: the handler only sets a flag; the trainer reads it at
// each step boundary and the ranks agree (allreduce max) to stop after the same step, so a
// signal to any one rank stops the whole job cleanly.
#pragma once

namespace ms::train {

// Installs the handlers for SIGINT and SIGTERM (replacing the default terminate action).
void install_stop_handlers();
// True once SIGINT or SIGTERM arrived since install_stop_handlers().
bool stop_requested();
// The signal that arrived (0 when none).
int stop_signal();
// Clears the flag (tests).
void clear_stop_request();

}  // namespace ms::train
