#include "distop/train/signals.hpp"

#include <signal.h>

#include <csignal>

namespace distop::train {

namespace {

volatile std::sig_atomic_t g_received = 0;
struct sigaction g_previous_term {};
struct sigaction g_previous_int {};

extern "C" void on_stop_signal(int signo) {
  if (g_received != 0) {
    // A second signal: the user means it. End as the signal would have without the handler.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  g_received = signo;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, &g_previous_term);
  ::sigaction(SIGINT, &action, &g_previous_int);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignals::received() noexcept { return static_cast<int>(g_received); }

}  // namespace distop::train
