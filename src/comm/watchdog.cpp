#include "distop/comm/watchdog.hpp"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../core/environment_hooks.hpp"
#include "distop/core/error.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"
#include "watchdog_call.hpp"

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
// Whether the program links distop::watchdog, which watches every blocking MPI call (its
// watchdog_interpose.cpp says so when the program starts).
std::atomic<bool> g_mpi_calls_watched{false};

// The wait in progress (one: distop drives MPI from one thread).
std::atomic<std::int64_t> g_since_ns{0};   // 0: none
std::atomic<const char*> g_op{nullptr};    // the outermost WatchedWait's name, or the MPI call's
std::atomic<const char*> g_call{nullptr};  // the MPI call under it, if any
std::atomic<int> g_comm_size{0};           // 0: not known
std::atomic<int> g_comm_rank{-1};
thread_local int t_depth = 0;

std::once_flag g_thread_once;

// The node's status board (open_board, below). A slot per rank of the node, written by its rank
// alone with relaxed atomics and no MPI call (a seqlock: `version` is odd while it writes), read by
// the other ranks' watchdog threads when they report: plain loads, since the job may be hung.
// steady_clock is CLOCK_MONOTONIC, one clock for the processes of a node.
enum SlotState : std::int32_t { kBusy = 0, kWaiting = 1, kEnding = 2 };
constexpr int kOpWords = 8;  // the operation's name, up to 63 characters

struct alignas(64) Slot {
  std::atomic<std::uint32_t> version{0};
  std::atomic<std::int32_t> world_rank{-1};  // -1: no rank
  std::atomic<std::int32_t> pid{0};
  std::atomic<std::uint64_t> pid_namespace{0};  // its /proc/self/ns/pid inode; 0: not known
  std::atomic<std::int32_t> state{kBusy};
  std::atomic<std::int32_t> comm_size{0};  // of the wait, or of the last one; 0: not known
  std::atomic<std::int32_t> comm_rank{-1};
  std::atomic<std::int64_t> since_ns{0};  // the last change of state
  std::atomic<std::int64_t> step{-1};
  std::atomic<std::uint64_t> entered{0};  // watched waits entered
  std::atomic<std::uint64_t> op[kOpWords] = {};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<std::int64_t>::is_always_lock_free &&
              std::atomic<std::uint32_t>::is_always_lock_free);

// A slot's contents, as read by another rank.
struct SlotView {
  bool consistent = false;  // false: its rank was writing it (or stopped while it wrote)
  int world_rank = -1, pid = 0, state = kBusy, comm_size = 0, comm_rank = -1;
  std::uint64_t pid_namespace = 0;
  std::int64_t since_ns = 0, step = -1;
  std::uint64_t entered = 0;
  std::string op;
};

std::atomic<Slot*> g_board{nullptr};                  // the node's slots, or null
std::atomic<Slot*> g_slot{nullptr};                   // this rank's slot, or null
int g_board_size = 0;                                 // slots (ranks of the node)
[[maybe_unused]] MPI_Win g_board_win = MPI_WIN_NULL;  // unused in the SMPI build
[[maybe_unused]] MPI_Comm g_board_comm = MPI_COMM_NULL;

class SlotWrite {
 public:
  explicit SlotWrite(Slot& s) noexcept : s_(s), v_(s.version.load(std::memory_order_relaxed)) {
    s_.version.store(v_ + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~SlotWrite() { s_.version.store(v_ + 2, std::memory_order_release); }
  SlotWrite(const SlotWrite&) = delete;
  SlotWrite& operator=(const SlotWrite&) = delete;

 private:
  Slot& s_;
  std::uint32_t v_;
};

void publish_wait(const char* op, int comm_size, int comm_rank, std::int64_t since) noexcept {
  Slot* s = g_slot.load(std::memory_order_relaxed);
  if (s == nullptr) return;
  std::uint64_t words[kOpWords] = {};
  const std::size_t length = std::min(std::strlen(op), sizeof words - 1);
  std::memcpy(words, op, length);
  SlotWrite w(*s);
  // The words up to the name's terminating zero (a reader stops there).
  for (std::size_t i = 0; i <= length / sizeof(std::uint64_t); ++i)
    s->op[i].store(words[i], std::memory_order_relaxed);
  s->comm_size.store(comm_size, std::memory_order_relaxed);
  s->comm_rank.store(comm_rank, std::memory_order_relaxed);
  s->entered.store(s->entered.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  s->since_ns.store(since, std::memory_order_relaxed);
  s->state.store(kWaiting, std::memory_order_relaxed);
}

void publish_state(std::int32_t state) noexcept {
  Slot* s = g_slot.load(std::memory_order_relaxed);
  if (s == nullptr) return;
  SlotWrite w(*s);
  s->since_ns.store(now_ns(), std::memory_order_relaxed);
  s->state.store(state, std::memory_order_relaxed);
}

SlotView read_slot(const Slot& s) {
  SlotView v;
  for (int attempt = 0; attempt < 100 && !v.consistent; ++attempt) {
    const std::uint32_t before = s.version.load(std::memory_order_acquire);
    v.world_rank = s.world_rank.load(std::memory_order_relaxed);
    v.pid = s.pid.load(std::memory_order_relaxed);
    v.pid_namespace = s.pid_namespace.load(std::memory_order_relaxed);
    v.state = s.state.load(std::memory_order_relaxed);
    v.comm_size = s.comm_size.load(std::memory_order_relaxed);
    v.comm_rank = s.comm_rank.load(std::memory_order_relaxed);
    v.since_ns = s.since_ns.load(std::memory_order_relaxed);
    v.step = s.step.load(std::memory_order_relaxed);
    v.entered = s.entered.load(std::memory_order_relaxed);
    char name[sizeof(std::uint64_t) * kOpWords + 1] = {};
    for (int i = 0; i < kOpWords; ++i) {
      const std::uint64_t word = s.op[i].load(std::memory_order_relaxed);
      std::memcpy(name + i * sizeof word, &word, sizeof word);
    }
    v.op = name;
    std::atomic_thread_fence(std::memory_order_acquire);
    v.consistent = before % 2 == 0 && s.version.load(std::memory_order_relaxed) == before;
    if (!v.consistent) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return v;
}

// What the kernel says of a process of this node: "stopped", "exited", "gone", or "" (running or
// sleeping, or not known).
std::string process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return "gone";
  std::string stat;
  std::getline(in, stat);
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  switch (stat[paren + 2]) {
    case 'T':
    case 't':
      return "stopped";
    case 'Z':
    case 'X':
      return "exited";
    default:
      return "";
  }
}

std::string seconds(std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s",
                static_cast<double>(std::max<std::int64_t>(ns, 0)) * 1e-9);
  return buf;
}

std::string on_ranks(int comm_size) {
  return comm_size > 0 ? " on " + std::to_string(comm_size) + " rank" + (comm_size == 1 ? "" : "s")
                       : "";
}

// The board's part of a report: the other ranks of this node, by whether they have arrived in the
// wait `op` on a communicator of `comm_size` ranks ("" when there is no board).
std::string board_report(const std::string& op, int comm_size) {
  const Slot* board = g_board.load();
  const Slot* mine = g_slot.load();
  if (board == nullptr || mine == nullptr) return "";
  const std::int64_t now = now_ns();
  constexpr std::size_t kMaxNamed = 16;
  std::vector<std::string> missing, elsewhere;
  std::vector<int> here;
  for (int i = 0; i < g_board_size; ++i) {
    const Slot& slot = board[i];
    if (&slot == mine) continue;
    const SlotView v = read_slot(slot);
    if (v.world_rank < 0) continue;
    // The kernel's word on the process, where its pid means the same here (ranks of a node in
    // containers of their own may not share one pid namespace).
    const std::string proc =
        v.pid_namespace != 0 &&
                v.pid_namespace == mine->pid_namespace.load(std::memory_order_relaxed)
            ? process_state(v.pid)
            : "";
    const bool same = v.state == kWaiting && v.op == op && v.comm_size == comm_size;
    if (same && proc.empty()) {
      here.push_back(v.world_rank);
      continue;
    }
    std::string d = "rank " + std::to_string(v.world_rank) + " (pid " + std::to_string(v.pid);
    if (!proc.empty()) d += ", " + proc;
    d += "; ";
    const std::string last = v.op.empty() ? "" : v.op;
    if (v.state == kWaiting) {
      d += "waiting for " + seconds(now - v.since_ns) + " in " + last + on_ranks(v.comm_size);
    } else if (v.state == kEnding) {
      d += "ending (its distop Environment closing) for " + seconds(now - v.since_ns);
    } else if (last.empty()) {
      d += "not in a wait for " + seconds(now - v.since_ns) + ", none yet";
    } else {
      d += "not in a wait for " + seconds(now - v.since_ns) + " since it left " + last;
    }
    if (v.step >= 0) d += ", at step " + std::to_string(v.step);
    d += ", " + std::to_string(v.entered) + " waits entered";
    if (!v.consistent) d += ", its entry half-written";
    d += ")";
    // A stopped or dead rank cannot arrive, whatever it waits in.
    (v.state == kWaiting && !same && proc.empty() ? elsewhere : missing).push_back(std::move(d));
  }
  const auto list = [](const std::vector<std::string>& items) {
    if (items.empty()) return std::string("none");
    std::string s;
    for (std::size_t k = 0; k < items.size() && k < kMaxNamed; ++k) s += (k ? "; " : "") + items[k];
    if (items.size() > kMaxNamed)
      s += "; and " + std::to_string(items.size() - kMaxNamed) + " more";
    return s;
  };
  std::string ranks_here;
  for (std::size_t k = 0; k < here.size(); ++k)
    ranks_here += (k ? ", " : "") + std::to_string(here[k]);
  const SlotView me = read_slot(*mine);
  return "  on this node (" + std::to_string(g_board_size) + " ranks; this rank has entered " +
         std::to_string(me.entered) + " waits): not arrived: " + list(missing) +
         ". Waiting in another operation: " + list(elsewhere) + ". Waiting in " + op +
         on_ranks(comm_size) + " too: " +
         (here.empty() ? std::string("none")
                       : "rank" + std::string(here.size() > 1 ? "s " : " ") + ranks_here) +
         ". Ranks on other nodes cannot be seen from here.\n";
}

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

// The wait in progress as a report names it: "MPI_Wait [in reduce_sum, in Broadcast adjoint
// (...)], on a communicator of 3 ranks (its rank 0)".
std::string wait_text(const char* op, const char* call) {
  std::string what = op ? op : "an MPI call";
  std::string in;  // what the wait is part of: the distop wait around the MPI call, the operator
  if (call && op && std::string(call) != op) {
    what = call;
    in = std::string("in ") + op;
  }
  const std::string running = running_operator();  // noexcept in effect: describe's errors caught
  if (!running.empty()) in += (in.empty() ? "in " : ", in ") + running;
  if (!in.empty()) what += " [" + in + "]";
  const int size = g_comm_size.load(), rank = g_comm_rank.load();
  if (size > 0)
    what += ", on a communicator of " + std::to_string(size) + " rank" + (size == 1 ? "" : "s") +
            " (its rank " + std::to_string(rank) + ")";
  return what;
}

// " at training step 17 during <context>", or "".
std::string step_text() {
  const std::int64_t step = g_step.load();
  std::string at = step >= 0 ? " at training step " + std::to_string(step) : "";
  if (const char* context = g_context.load()) at += std::string(" during ") + context;
  return at;
}

[[noreturn]] void report_and_abort(double waited, double limit_s) {
  int world = -1;
  // The abort path: its MPI calls stay unchecked (the job ends either way; -1 names no rank).
  PMPI_Comm_rank(MPI_COMM_WORLD, &world);
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  const char* op = g_op.load();
  const std::string what = wait_text(op, g_call.load());
  const int size = g_comm_size.load();
  const std::string at = step_text();
  char line[1024];
  std::snprintf(line, sizeof line,
                "distop watchdog: rank %d (%s, pid %d) has waited %.1f s in %s%s; no progress "
                "within DISTOP_WATCHDOG_SECONDS=%g: aborting the job (is a rank stopped, dead, or "
                "in another collective?)\n",
                world, host, static_cast<int>(::getpid()), waited, what.c_str(), at.c_str(),
                limit_s);
  // One paragraph per reporting rank, in one write, so that the reports of several ranks do not
  // interleave.
  const std::string report = line + board_report(op ? op : "", size);
  for (std::size_t done = 0; done < report.size();) {
    const ssize_t n = ::write(STDERR_FILENO, report.data() + done, report.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
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

// Records the wait (for the report, current_wait and the board) whether or not the watchdog is on.
void arm(const char* op, const char* call, MPI_Comm comm) noexcept {
  const bool on = limit() > 0;
  if (on) std::call_once(g_thread_once, [] { std::thread(watch_loop).detach(); });
  int size = 0, rank = -1;
  if (comm != MPI_COMM_NULL) {
    // Unchecked (noexcept, and inside MPI calls): on a failure the report says "not known".
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
  }
  const std::int64_t since = now_ns();
  publish_wait(op, size, rank, since);
  g_op.store(op);
  g_call.store(call);
  g_comm_size.store(size);
  g_comm_rank.store(rank);
  g_since_ns.store(since);
}

void disarm() noexcept {
  g_since_ns.store(0);
  publish_state(kBusy);
}

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

}  // namespace

double watchdog_seconds() { return limit(); }

std::string current_wait() {
  const std::int64_t since = g_since_ns.load();
  if (since == 0) return "";
  return wait_text(g_op.load(), g_call.load()) + " for " + seconds(now_ns() - since) + step_text();
}

void set_watchdog_seconds(double seconds) {
  DISTOP_CHECK(std::isfinite(seconds) && seconds >= 0, "set_watchdog_seconds",
               "the limit must be a finite number of seconds >= 0 (0: off), found ", seconds);
  g_limit_s.store(seconds);
}

void set_watchdog_step(std::int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  if (Slot* s = g_slot.load(std::memory_order_relaxed))
    s->step.store(step, std::memory_order_relaxed);
}

void set_watchdog_context(const char* context) { g_context.store(context); }

bool watchdog_watches_mpi_calls() noexcept { return g_mpi_calls_watched.load(); }

namespace {

thread_local WaitSpan t_outermost_span;  // of the outermost wait (they do not overlap)

// Enters a wait named `op` (a WatchedWait's, or an MPI call's, then `call` too): watched if it is
// the outermost; inside a watched one, an MPI call names itself as the call under it. Returns
// whether it is the outermost.
bool enter_wait(const char* op, const char* call, MPI_Comm comm) noexcept {
  if (t_depth++ == 0) {
    t_outermost_span = WaitSpan();
    t_outermost_span.begin(op);
    arm(op, call, comm);
    return true;
  }
  if (call != nullptr && g_since_ns.load(std::memory_order_relaxed) != 0) g_call.store(call);
  return false;
}

void leave_wait(bool outermost) {
  --t_depth;
  if (!outermost) return;
  disarm();
  t_outermost_span.end();
}

}  // namespace

WatchedWait::WatchedWait(const char* op, MPI_Comm comm) noexcept
    : outermost_(enter_wait(op, nullptr, comm)) {}

WatchedWait::~WatchedWait() { leave_wait(outermost_); }

namespace detail {

WatchedMpiCall::WatchedMpiCall(const char* call, MPI_Comm comm) noexcept
    : outermost_(enter_wait(call, call, comm)) {}

WatchedMpiCall::~WatchedMpiCall() { leave_wait(outermost_); }

void note_mpi_interposition() noexcept { g_mpi_calls_watched.store(true); }

}  // namespace detail

// The running operator (OperatorScope). The watchdog's thread reads a scope that lives on the
// stack of the thread that opened it, so a scope must not end while it is read. A Dekker-style
// handshake on sequentially consistent atomics ensures that: the reader sets g_reporting, then
// loads g_scope and reads the scope; a scope's destructor takes itself out of g_scope, then spins
// while g_reporting is set. In the single total order of these operations either the reader's load
// of g_scope comes after the destructor's update (and does not see the ending scope), or the
// reader's store to g_reporting comes before the destructor's load of it (and the destructor waits
// until the reader is done). g_scope is only ever null or a live scope: a scope publishes itself,
// and on ending restores its enclosing scope of the same thread (alive: it encloses this one) only
// where g_scope still names it (a scope another thread opened since stays).
namespace {
std::atomic<const OperatorScope*> g_scope{nullptr};
std::atomic<bool> g_reporting{false};
[[maybe_unused]] thread_local const OperatorScope* t_scope = nullptr;  // this thread's innermost
}  // namespace

OperatorScope::OperatorScope(const void* op, Describe describe, bool adjoint) noexcept
    : op_(op), describe_(describe), adjoint_(adjoint) {
#if !DISTOP_SMPI  // the watchdog is off there
  enclosing_ = t_scope;
  t_scope = this;
  g_scope.store(this);
#endif
}

OperatorScope::~OperatorScope() {
#if !DISTOP_SMPI
  t_scope = enclosing_;
  const OperatorScope* self = this;
  g_scope.compare_exchange_strong(self, enclosing_);
  while (g_reporting.load()) std::this_thread::yield();
#endif
}

std::string running_operator() {
  std::string text;
  g_reporting.store(true);
  if (const OperatorScope* s = g_scope.load()) {
    try {
      text = s->describe_(s->op_, s->adjoint_);
    } catch (...) {
      text.clear();  // a report without the operator rather than none
    }
  }
  g_reporting.store(false);
  return text;
}

// The node's status board: opened by every Environment once MPI is initialised (collective over
// `world`: MPI_Comm_split_type of the ranks that share memory, then MPI_Win_allocate_shared),
// closed before MPI is finalised. Without one (no Environment, a failure, or the SMPI build, where
// it is compiled out) the watchdog reports only its own rank's wait. Its MPI calls stay unchecked:
// a failure leaves no board, never an error. PMPI_: they are the watchdog's own, not the program's.
namespace {

void open_board([[maybe_unused]] MPI_Comm world) noexcept {
#if !DISTOP_SMPI  // SMPI's ranks are threads of one process, and the watchdog is off there
  if (g_board.load() != nullptr) return;
  MPI_Comm node = MPI_COMM_NULL;
  if (PMPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return;
  int size = 0, rank = 0, world_rank = -1;
  PMPI_Comm_size(node, &size);
  PMPI_Comm_rank(node, &rank);
  PMPI_Comm_rank(world, &world_rank);
  // The node's first rank allocates every slot; the others map them.
  const MPI_Aint bytes = rank == 0 ? static_cast<MPI_Aint>(sizeof(Slot)) * size : 0;
  void* mapped = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  if (PMPI_Win_allocate_shared(bytes, static_cast<int>(sizeof(Slot)), MPI_INFO_NULL, node, &mapped,
                               &win) != MPI_SUCCESS) {
    PMPI_Comm_free(&node);
    return;
  }
  PMPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  MPI_Aint got = 0;
  int unit = 0;
  void* base = nullptr;
  if (PMPI_Win_shared_query(win, 0, &got, &unit, &base) != MPI_SUCCESS || base == nullptr ||
      got < static_cast<MPI_Aint>(sizeof(Slot)) * size ||
      reinterpret_cast<std::uintptr_t>(base) % alignof(Slot) != 0) {
    // Every rank takes part in the frees below, whatever the others found.
    base = nullptr;
  }
  Slot* slots = static_cast<Slot*>(base);
  Slot* mine = slots ? new (&slots[rank]) Slot : nullptr;
  if (mine) {
    mine->world_rank.store(world_rank, std::memory_order_relaxed);
    mine->pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
    struct stat ns {};
    if (::stat("/proc/self/ns/pid", &ns) == 0)
      mine->pid_namespace.store(static_cast<std::uint64_t>(ns.st_ino), std::memory_order_relaxed);
    mine->step.store(g_step.load(), std::memory_order_relaxed);
    mine->since_ns.store(now_ns(), std::memory_order_relaxed);
  }
  // Every slot written before any rank reads one, and a board only where every rank of the node
  // has one (otherwise a slot would be read that no rank constructed).
  int ok = mine != nullptr ? 1 : 0, all_ok = 0;
  if (PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) all_ok = 0;
  if (all_ok == 0) {
    PMPI_Win_free(&win);
    PMPI_Comm_free(&node);
    return;
  }
  g_board_win = win;
  g_board_comm = node;
  g_board_size = size;
  g_board.store(slots);
  g_slot.store(mine);
#endif
}

// Marks this rank's slot as ending and frees the board (collective over the node's ranks).
void close_board() noexcept {
#if !DISTOP_SMPI
  if (g_slot.load() == nullptr) return;
  publish_state(kEnding);
  g_slot.store(nullptr);
  g_board.store(nullptr);
  // Unchecked, as in open_board: Environment's destructor closes it, which must not throw.
  PMPI_Win_free(&g_board_win);
  PMPI_Comm_free(&g_board_comm);
  g_board_size = 0;
#endif
}

// core's Environment cannot call comm: comm installs the board's opening and closing there.
[[maybe_unused]] const bool g_board_hook =
    (distop::detail::add_environment_hook({&open_board, &close_board}), true);

}  // namespace

}  // namespace distop::comm
