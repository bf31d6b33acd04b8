// Async-signal-safe stop flag; see stop_signal.h.
#include "train/stop_signal.h"

#include <csignal>

namespace ms::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int signal) { g_signal = signal; }

extern "C" void stop_on_user_signal(int) { std::raise(SIGTERM); }

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void treat_user_signals_as_term() {
  struct sigaction action = {};
  action.sa_handler = stop_on_user_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGUSR2, &action, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
void clear_stop_request() { g_signal = 0; }

}  // namespace ms::train
