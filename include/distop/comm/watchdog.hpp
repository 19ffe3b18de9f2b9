#pragma once
// A hang watchdog: a rank that waits in an MPI collective or a wait longer than a limit reports
// what it waits in and aborts the job, instead of waiting for ever (a rank stopped, crashed in a
// way MPI does not see, or gone into another collective by a bug).
//
// What it watches. Every blocking MPI call a distop program makes, distop's own and the user's:
// the library defines MPI_Wait, MPI_Waitall, MPI_Waitany, MPI_Waitsome, MPI_Recv, MPI_Send,
// MPI_Ssend, MPI_Sendrecv, MPI_Probe, MPI_Barrier, MPI_Bcast, MPI_Reduce, MPI_Allreduce,
// MPI_Gather(v), MPI_Scatter(v), MPI_Allgather(v), MPI_Alltoall(v), MPI_Reduce_scatter_block,
// MPI_Comm_split and MPI_Comm_dup through the MPI profiling interface (each calls its PMPI_ form),
// and distop's polling waits (the yielding waits of comm/collectives.hpp and comm::Exchange) are
// watched as one wait each (WatchedWait). A loop of MPI_Test calls of the user's own is not. A
// profiling tool that also defines these MPI_ functions and is linked before distop takes them
// over, and the watchdog then sees only distop's polling waits.
//
// The limit. watchdog_seconds(): DISTOP_WATCHDOG_SECONDS when set (a number of seconds; 0 turns
// the watchdog off), else 600 s; set_watchdog_seconds changes it. A thread started at the first
// watched call checks the wait in progress a few times per limit (at most every second).
//
// The report, on stderr of the rank that waited too long, then MPI_Abort(MPI_COMM_WORLD, 70):
//   distop watchdog: rank 0 (host, pid 1234) has waited 3.0 s in MPI_Wait [in allreduce_sum,
//   on a communicator of 2 ranks (its rank 0)] at training step 17 [during <context>]; no
//   progress within
//   DISTOP_WATCHDOG_SECONDS=3: aborting the job (is a rank stopped, dead, or in another
//   collective?)
// A rank cannot tell which ranks have not arrived (MPI does not say); every rank whose wait
// exceeds the limit reports its own, so the ranks missing from the reports are the suspects.

#include <mpi.h>

#include <cstdint>

namespace distop::comm {

// The limit in seconds (0: off). See above.
double watchdog_seconds();
// Sets the limit (0 turns the watchdog off; negative is an error). Local; takes effect for the
// waits that start after it.
void set_watchdog_seconds(double seconds);

// The training step to name in reports (train::fit sets it); -1: none.
void set_watchdog_step(std::int64_t step);
// What the program is doing, to name in reports ("during <context>"; nullptr: nothing). The string
// must outlive its use (until the next call). The test harness names the running test.
void set_watchdog_context(const char* context);

// Watches the wait of its scope as one operation named `op` (a string literal: it is kept), on
// `comm` (MPI_COMM_NULL: not known). Waits nest: only the outermost is watched, and names the
// report. Cheap: a clock read and a few stores. For polling loops (MPI_Test and yield) that the
// MPI_ interposition cannot see as one wait.
class WatchedWait {
 public:
  explicit WatchedWait(const char* op, MPI_Comm comm = MPI_COMM_NULL) noexcept;
  ~WatchedWait();
  WatchedWait(const WatchedWait&) = delete;
  WatchedWait& operator=(const WatchedWait&) = delete;

 private:
  bool outermost_ = false;
};

}  // namespace distop::comm
