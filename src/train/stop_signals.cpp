// The handler does only what is async-signal-safe: it notes the signal and writes one line to stderr
// with write(2); the loop polls received() between steps.
#include "train/stop_signals.h"

#include <unistd.h>

#include <csignal>

namespace tk {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // a second signal: the user wants out now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
  static const char msg[] = "\ntokamak: stopping after this step and saving a checkpoint (signal again to quit at once)\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_stop_signal = 0;
}

int StopSignals::received() const { return g_stop_signal; }

}  // namespace tk
