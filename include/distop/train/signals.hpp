#pragma once
// Stopping a training run cleanly on SIGTERM and SIGINT (a batch system's time limit, a
// preemption, Ctrl-C): the signal is only noted; the training loop acts on it at a step boundary
// that every rank agrees on (train::fit).

namespace distop::train {

// While an object lives, SIGTERM and SIGINT set a flag (received()) instead of ending the
// process; a second such signal ends the process at once, as the first would have without the
// handler. The previous handlers come back when the object is destroyed. One object at a time per
// process. MPICH's mpiexec (hydra) passes SIGTERM and SIGINT on to every rank.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The number of the first signal caught since construction; 0 if none.
  static int received() noexcept;
};

}  // namespace distop::train
