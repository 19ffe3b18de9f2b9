#pragma once
// Stopping a training run cleanly on SIGTERM and SIGINT (a batch system's time limit, a
// preemption, Ctrl-C): the signal is only noted; the training loop acts on it at a step boundary
// that every rank agrees on (train::fit). A rank that cannot get there (it waits in a collective
// that a stopped or lost rank never joins) ends itself after a grace period, saying where it
// waits, rather than ignoring the signal until the hang watchdog's much longer limit.

namespace distop::train {

// While an object lives, SIGTERM and SIGINT set a flag (received()) instead of ending the
// process; a second such signal ends the process at once, as the first would have without the
// handler. The previous handlers come back when the object is destroyed. One object at a time per
// process. MPICH's mpiexec (hydra) passes SIGTERM and SIGINT on to every rank.
//
// The grace period: DISTOP_SIGNAL_GRACE_SECONDS (a number of seconds; 0 turns it off), else 60 s.
// Once a signal has come, a thread of the object's own waits; if that long passes without the
// program reaching a step boundary (a call of received(), which train::fit makes once a step) and
// without the object being destroyed, the process writes to stderr
//   distop: rank 1 (pid 4321): SIGTERM came 60.0 s ago and no step boundary was reached since;
//   ending the process with exit status 143. It waits in MPI_Allreduce [in ...], on a
//   communicator of 2 ranks (its rank 1) for 61.2 s at training step 17
// (the wait as the hang watchdog names it, comm::current_wait; without distop::watchdog linked,
// only distop's own waits are seen, not a blocking MPI call) and ends with exit status
// 128 + the signal's number, without MPI_Finalize (mpiexec then ends the other ranks). Each
// boundary reached starts the period anew, so a run whose steps and final checkpoint each take
// less than the period still stops cleanly.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The number of the first signal caught since construction; 0 if none. A call after a signal
  // marks a step boundary (see above).
  static int received() noexcept;

  // The grace period in seconds (0: off), from DISTOP_SIGNAL_GRACE_SECONDS (a value that is not a
  // number of seconds >= 0 is named on stderr and the default used).
  static double grace_seconds();
};

}  // namespace distop::train
