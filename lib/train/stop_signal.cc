// Async-signal-safe stop flag; see stop_signal.h.
#include "train/stop_signal.h"

#include <csignal>

namespace ms::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int signal) { g_signal = signal; }

}  // namespace

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
void clear_stop_request() { g_signal = 0; }

}  // namespace ms::train
