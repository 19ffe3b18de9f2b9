#pragma once
// A hang watchdog: a rank that waits in an MPI collective or a wait longer than a limit reports
// what it waits in and aborts the job, instead of waiting for ever (a rank stopped, crashed in a
// way MPI does not see, or gone into another collective by a bug).
//
// What it watches. Always: distop's own waits (every wait of a comm::Request, comm::Exchange's
// waits, and the collectives of comm/collectives.hpp where they poll, on nodes that run more ranks
// than cores) and the program's WatchedWaits, each as one wait. In a program linked with the
// library distop::watchdog (CMake: target_link_libraries(app PRIVATE distop::distop
// distop::watchdog)), every blocking MPI call too, distop's and the program's: that library
// defines MPI_Wait, MPI_Waitall, MPI_Waitany, MPI_Waitsome, MPI_Recv, MPI_Send, MPI_Ssend,
// MPI_Sendrecv, MPI_Probe, MPI_Barrier, MPI_Bcast, MPI_Reduce, MPI_Allreduce, MPI_Gather(v),
// MPI_Scatter(v), MPI_Allgather(v), MPI_Alltoall(v), MPI_Reduce_scatter_block, MPI_Comm_split and
// MPI_Comm_dup through the MPI profiling interface (each calls its PMPI_ form). Without it a rank
// stuck in a blocking MPI call is not reported (distop's blocking collectives, taken on nodes with
// a core per rank, its plans' metadata exchanges, the program's own calls), and no MPI_ function
// is defined by distop, so that a profiler that interposes MPI (Score-P, mpiP) can take them; a
// profiler linked before distop::watchdog takes them over from it. A loop of MPI_Test calls of the
// program's own is never watched.
//
// The limit. watchdog_seconds(): DISTOP_WATCHDOG_SECONDS when set (a number of seconds; 0 turns
// the watchdog off), else 600 s; set_watchdog_seconds changes it. A thread started at the first
// watched call checks the wait in progress a few times per limit (at most every second).
//
// The report, on stderr of the rank that waited too long, then MPI_Abort(MPI_COMM_WORLD, 70):
//   distop watchdog: rank 0 (host, pid 1234) has waited 3.0 s in MPI_Wait [in reduce_sum, in
//   Broadcast adjoint (domain [4, 120] on partition [1, 1]; range [4, 120] on partition [3, 1])],
//   on a communicator of 3 ranks (its rank 0) at training step 17 [during <context>]; no progress
//   within DISTOP_WATCHDOG_SECONDS=3: aborting the job (is a rank stopped, dead, or in another
//   collective?)
//     on this node (3 ranks; this rank has entered 1797 waits): not arrived: rank 1 (pid 4321,
//     stopped; waiting for 3.1 s in reduce_sum on 3 ranks, at step 17, 1796 waits entered).
//     Waiting in another operation: none. Waiting in reduce_sum on 3 ranks too: rank 2. Ranks
//     on other nodes cannot be seen from here.
// The brackets name what the MPI call is part of: the distop wait around it (WatchedWait), and the
// operator whose apply or apply_adjoint runs (OperatorScope below) with its direction and spaces
// (global shape, partition shape); a forward or adjoint called directly (not through apply,
// apply_adjoint or an OperatorScope of its own) is not named.
// The second line names the ranks that have not arrived, as far as this rank can tell: MPI does not
// say, so distop::Environment opens a status board per node (MPI_Comm_split_type of the ranks
// sharing memory, MPI_Win_allocate_shared; a slot per rank) where each rank publishes, with a few
// relaxed atomic stores per watched wait and no MPI call, whether it waits, in which operation (the
// outermost name above) on how many ranks, since when, at which step, and how many watched waits it
// has entered. The reporting rank reads its node's slots (plain loads, no MPI) and the kernel's
// state of each process (/proc/<pid>/stat, where they share a pid namespace) and lists, among the
// other ranks of its node: "not arrived": those not in a wait (busy since they left their last one,
// or ending, their Environment closing), and those stopped (SIGSTOP, a debugger), exited or gone
// whatever they wait in; "waiting in another operation": running ranks waiting in an operation of
// another name or communicator size (a rank that waits in the same operation's earlier call is not
// told apart); and the ranks waiting in the same one. Its limits: only ranks of the same node are
// seen (the report says so), and there is no board, so only the first line, in programs that
// initialise MPI without an Environment, where shared windows fail, and in the SMPI build (compiled
// out). Every rank whose wait exceeds the limit reports its own paragraph (one write), then aborts
// the job.

#include <mpi.h>

#include <cstdint>
#include <string>

namespace distop::comm {

// The limit in seconds (0: off). See above.
double watchdog_seconds();
// Whether every blocking MPI call is watched: the program links distop::watchdog. See above.
bool watchdog_watches_mpi_calls() noexcept;
// Sets the limit (0 turns the watchdog off; negative is an error). Local; takes effect for the
// waits that start after it.
void set_watchdog_seconds(double seconds);

// The wait this rank is in now, as the report names it: "MPI_Wait [in reduce_sum, in Broadcast
// adjoint (...)], on a communicator of 3 ranks (its rank 0) for 3.0 s at training step 17", or ""
// when it is in no watched wait (without distop::watchdog, a blocking MPI call is not one: see
// above). Also with the watchdog off. Callable from any thread (train::StopSignals names the wait
// of a rank that does not reach a step boundary after SIGTERM).
std::string current_wait();

// The training step to name in reports (train::fit sets it); -1: none.
void set_watchdog_step(std::int64_t step);
// What the program is doing, to name in reports ("during <context>"; nullptr: nothing). The string
// must outlive its use (until the next call). The test harness names the running test.
void set_watchdog_context(const char* context);

// Watches the wait of its scope as one operation named `op` (a string literal: it is kept), on
// `comm` (MPI_COMM_NULL: not known). Waits nest: only the outermost is watched, and names the
// report. Cheap: a clock read and a few stores. For polling loops (MPI_Test and yield), which
// distop::watchdog's MPI_ definitions cannot see as one wait.
class WatchedWait {
 public:
  explicit WatchedWait(const char* op, MPI_Comm comm = MPI_COMM_NULL) noexcept;
  ~WatchedWait();
  WatchedWait(const WatchedWait&) = delete;
  WatchedWait& operator=(const WatchedWait&) = delete;

 private:
  bool outermost_ = false;
};

// Names, in a report written while its scope runs, the operator whose forward or adjoint runs
// there: LinearOperator's apply and apply_adjoint, and the waits of the nonblocking transfers
// (autodiff/nonblocking.hpp), open one. `op` is the operator (type-erased; it must outlive the
// scope) and `describe` makes its text ("Broadcast adjoint (domain [4, 120] on partition [1, 1];
// range ...)"); it is called only when a report is written, on the watchdog's thread, and may
// throw (the report then names no operator). Scopes nest: the innermost names the report. Cheap:
// a few atomic operations and no string, also with the watchdog off; compiled out in the SMPI
// build. distop drives MPI from one thread: where several threads open scopes at once, the report
// names the latest one opened.
class OperatorScope {
 public:
  using Describe = std::string (*)(const void* op, bool adjoint);
  OperatorScope(const void* op, Describe describe, bool adjoint) noexcept;
  ~OperatorScope();
  OperatorScope(const OperatorScope&) = delete;
  OperatorScope& operator=(const OperatorScope&) = delete;

 private:
  friend std::string running_operator();
  const void* op_;
  Describe describe_;
  bool adjoint_;
  const OperatorScope* enclosing_ = nullptr;  // this thread's scope around this one
};

// The text of the innermost OperatorScope open now ("" if none, or if describing it threw). Safe
// to call from another thread than the scope's (the watchdog's): a scope that ends meanwhile waits
// until the description is made.
std::string running_operator();

}  // namespace distop::comm
