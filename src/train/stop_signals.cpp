// The handler does only what is async-signal-safe: it notes the signal and writes one line to stderr
// with write(2); the loop polls received() between steps.
#include "train/stop_signals.h"

#include <unistd.h>

#include <csignal>
#include <iterator>

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
  for (size_t i = 0; i < std::size(kSignals); i++) {
    sigaction(kSignals[i], &sa, &old_[i]);
    // Under nohup SIGHUP is ignored so that the run outlives its terminal: it stays ignored.
    if (kSignals[i] == SIGHUP && old_[i].sa_handler == SIG_IGN) sigaction(SIGHUP, &old_[i], nullptr);
  }
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kSignals); i++) sigaction(kSignals[i], &old_[i], nullptr);
  g_stop_signal = 0;
}

int StopSignals::received() const { return g_stop_signal; }

const char* StopSignals::name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

}  // namespace tk
