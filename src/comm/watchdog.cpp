#include "distop/comm/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "distop/core/error.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"

namespace distop::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// -1: not read from the environment yet.
std::atomic<double> g_limit_s{-1.0};
std::atomic<std::int64_t> g_step{-1};
std::atomic<const char*> g_context{nullptr};

// The wait in progress (one: distop drives MPI from one thread).
std::atomic<std::int64_t> g_since_ns{0};   // 0: none
std::atomic<const char*> g_op{nullptr};    // the outermost WatchedWait's name, or the MPI call's
std::atomic<const char*> g_call{nullptr};  // the MPI call under it, if any
std::atomic<int> g_comm_size{0};           // 0: not known
std::atomic<int> g_comm_rank{-1};
thread_local int t_depth = 0;

std::once_flag g_thread_once;

double limit_from_environment() {
  const char* v = std::getenv("DISTOP_WATCHDOG_SECONDS");
  if (v == nullptr || *v == '\0') return 600.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s < 0) {
    std::fprintf(stderr,
                 "distop: DISTOP_WATCHDOG_SECONDS='%s' is not a number of seconds >= 0; using "
                 "600\n",
                 v);
    return 600.0;
  }
  return s;
}

double limit() {
#if DISTOP_SMPI
  // Under SimGrid's SMPI every simulated rank runs in one process and waits in simulated time: a
  // thread watching the wall clock would see the others' compute as this rank's wait. Off.
  return 0.0;
#endif
  double l = g_limit_s.load(std::memory_order_relaxed);
  if (l < 0) {
    l = limit_from_environment();
    double expected = -1.0;
    if (!g_limit_s.compare_exchange_strong(expected, l)) l = expected;
  }
  return l;
}

[[noreturn]] void report_and_abort(double waited, double limit_s) {
  int world = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &world);
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  const char* op = g_op.load();
  const char* call = g_call.load();
  std::string what = op ? op : "an MPI call";
  if (call && op && std::string(call) != op) what = std::string(call) + " [in " + op + "]";
  const int size = g_comm_size.load(), rank = g_comm_rank.load();
  if (size > 0)
    what += ", on a communicator of " + std::to_string(size) + " rank" + (size == 1 ? "" : "s") +
            " (its rank " + std::to_string(rank) + ")";
  const std::int64_t step = g_step.load();
  std::string at = step >= 0 ? " at training step " + std::to_string(step) : "";
  if (const char* context = g_context.load()) at += std::string(" during ") + context;
  std::fprintf(stderr,
               "distop watchdog: rank %d (%s, pid %d) has waited %.1f s in %s%s; no progress "
               "within DISTOP_WATCHDOG_SECONDS=%g: aborting the job (is a rank stopped, dead, or "
               "in another collective?)\n",
               world, host, static_cast<int>(::getpid()), waited, what.c_str(), at.c_str(),
               limit_s);
  std::fflush(stderr);
  // MPICH's launcher kills every process of the job as soon as one calls MPI_Abort, and drops what
  // the processes wrote but it has not forwarded yet: this report, and the reports of the other
  // ranks whose watchdogs fire at about the same time. A second's pause lets it forward them.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  PMPI_Abort(MPI_COMM_WORLD, 70);  // EX_SOFTWARE; not 124, which timeout(1) uses
  std::_Exit(70);
}

void watch_loop() {
  for (;;) {
    const double l = limit();
    const double period = l > 0 ? std::min(1.0, std::max(0.01, l / 8)) : 1.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(period));
    if (l <= 0) continue;
    const std::int64_t since = g_since_ns.load();
    if (since == 0) continue;
    const double waited = static_cast<double>(now_ns() - since) * 1e-9;
    if (waited > l && since == g_since_ns.load()) report_and_abort(waited, l);
  }
}

void arm(const char* op, const char* call, MPI_Comm comm) noexcept {
  if (limit() <= 0) return;
  std::call_once(g_thread_once, [] { std::thread(watch_loop).detach(); });
  int size = 0, rank = -1;
  if (comm != MPI_COMM_NULL) {
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
  }
  g_op.store(op);
  g_call.store(call);
  g_comm_size.store(size);
  g_comm_rank.store(rank);
  g_since_ns.store(now_ns());
}

void disarm() noexcept { g_since_ns.store(0); }

// The outermost wait's span, for the timers ("wait <op>") and the trace (category "wait").
class WaitSpan {
 public:
  void begin(const char* op) noexcept {
    if (!timers::enabled()) return;
    op_ = op;
    begin_ = Clock::now();
  }
  void end() {
    if (op_ == nullptr) return;
    const auto end = Clock::now();
    const std::string name = std::string("wait ") + op_;
    timers::add(name, std::chrono::duration<double>(end - begin_).count());
    trace::record("wait", name, begin_, end);
  }

 private:
  const char* op_ = nullptr;
  Clock::time_point begin_;
};

// An intercepted MPI call: watched unless a WatchedWait around it is already (then only named).
class Call {
 public:
  Call(const char* name, MPI_Comm comm) noexcept {
    if (t_depth++ == 0) {
      outermost_ = true;
      span_.begin(name);
      arm(name, name, comm);
    } else if (g_since_ns.load(std::memory_order_relaxed) != 0) {
      g_call.store(name);
    }
  }
  ~Call() {
    --t_depth;
    if (!outermost_) return;
    disarm();
    span_.end();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  bool outermost_ = false;
  WaitSpan span_;
};

}  // namespace

double watchdog_seconds() { return limit(); }

void set_watchdog_seconds(double seconds) {
  DISTOP_CHECK(std::isfinite(seconds) && seconds >= 0, "set_watchdog_seconds",
               "the limit must be a finite number of seconds >= 0 (0: off), found ", seconds);
  g_limit_s.store(seconds);
}

void set_watchdog_step(std::int64_t step) { g_step.store(step, std::memory_order_relaxed); }

void set_watchdog_context(const char* context) { g_context.store(context); }

namespace {
thread_local WaitSpan t_watched_span;  // of the outermost WatchedWait (they do not overlap)
}  // namespace

WatchedWait::WatchedWait(const char* op, MPI_Comm comm) noexcept {
  if (t_depth++ == 0) {
    outermost_ = true;
    t_watched_span = WaitSpan();
    t_watched_span.begin(op);
    arm(op, nullptr, comm);
  }
}

WatchedWait::~WatchedWait() {
  --t_depth;
  if (!outermost_) return;
  disarm();
  t_watched_span.end();
}

}  // namespace distop::comm

// The MPI profiling interface: these definitions come before the MPI library's in the link, so
// every blocking call is watched, then made through its PMPI_ name.
using distop::comm::Call;
extern "C" {

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  Call c("MPI_Wait", MPI_COMM_NULL);
  return PMPI_Wait(request, status);
}
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  Call c("MPI_Waitall", MPI_COMM_NULL);
  return PMPI_Waitall(count, requests, statuses);
}
int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  Call c("MPI_Waitany", MPI_COMM_NULL);
  return PMPI_Waitany(count, requests, index, status);
}
int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  Call c("MPI_Waitsome", MPI_COMM_NULL);
  return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
}
int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  Call c("MPI_Recv", comm);
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}
int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  Call c("MPI_Send", comm);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}
int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  Call c("MPI_Ssend", comm);
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}
int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  Call c("MPI_Sendrecv", comm);
  return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                       source, recvtag, comm, status);
}
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  Call c("MPI_Probe", comm);
  return PMPI_Probe(source, tag, comm, status);
}
int MPI_Barrier(MPI_Comm comm) {
  Call c("MPI_Barrier", comm);
  return PMPI_Barrier(comm);
}
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  Call c("MPI_Bcast", comm);
  return PMPI_Bcast(buf, count, type, root, comm);
}
int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  Call c("MPI_Reduce", comm);
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}
int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  Call c("MPI_Allreduce", comm);
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  Call c("MPI_Gather", comm);
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm) {
  Call c("MPI_Gatherv", comm);
  return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                      comm);
}
int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  Call c("MPI_Scatter", comm);
  return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm) {
  Call c("MPI_Scatterv", comm);
  return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                       comm);
}
int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  Call c("MPI_Allgather", comm);
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  Call c("MPI_Allgatherv", comm);
  return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}
int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  Call c("MPI_Alltoall", comm);
  return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  Call c("MPI_Alltoallv", comm);
  return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm);
}
int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                             MPI_Op op, MPI_Comm comm) {
  Call c("MPI_Reduce_scatter_block", comm);
  return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  Call c("MPI_Comm_split", comm);
  return PMPI_Comm_split(comm, color, key, newcomm);
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  Call c("MPI_Comm_dup", comm);
  return PMPI_Comm_dup(comm, newcomm);
}

}  // extern "C"
