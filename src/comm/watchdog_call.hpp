#pragma once
// What libdistop offers the hang watchdog's MPI profiling interface (comm/watchdog.hpp), which
// lives in a library of its own, distop::watchdog (watchdog_interpose.cpp): a program links it to
// have every blocking MPI call watched; libdistop itself defines no MPI_ function.

#include <mpi.h>

namespace distop::comm::detail {

// One blocking MPI call named `call` (a string literal) on `comm` (MPI_COMM_NULL: not known),
// watched for its scope as a wait of its own; inside a WatchedWait it is not watched again, but
// names itself in the report as the call under that wait.
class WatchedMpiCall {
 public:
  WatchedMpiCall(const char* call, MPI_Comm comm) noexcept;
  ~WatchedMpiCall();
  WatchedMpiCall(const WatchedMpiCall&) = delete;
  WatchedMpiCall& operator=(const WatchedMpiCall&) = delete;

 private:
  bool outermost_;
};

// Called by distop::watchdog when the program starts: watchdog_watches_mpi_calls() is then true.
void note_mpi_interposition() noexcept;

}  // namespace distop::comm::detail
