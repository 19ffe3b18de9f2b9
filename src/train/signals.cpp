#include "distop/train/signals.hpp"

#include <mpi.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "distop/comm/watchdog.hpp"

namespace distop::train {

namespace {

constexpr double kDefaultGraceSeconds = 60;

volatile std::sig_atomic_t g_received = 0;
struct sigaction g_previous_term {};
struct sigaction g_previous_int {};

// The grace period's watcher: woken by the handler (sem_post is async-signal-safe), then waits
// until the period has passed since the signal or the last step boundary, or the object ends.
sem_t g_signalled;
std::atomic<std::int64_t> g_boundary_ns{0};  // the signal's time, then the last boundary's
std::mutex g_mutex;
std::condition_variable g_wake;
bool g_closing = false;
std::thread g_watcher;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

extern "C" void on_stop_signal(int signo) {
  if (g_received != 0) {
    // A second signal: the user means it. End as the signal would have without the handler.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  g_received = signo;
  ::sem_post(&g_signalled);
}

// Says where this rank waits and ends the process with 128 + signo.
[[noreturn]] void end_process(int signo, double waited, double grace) {
  // Unchecked: on the way out of the process; a failed query leaves the rank unnamed (-1).
  int rank = -1, running = 0, finalized = 0;
  MPI_Initialized(&running);
  MPI_Finalized(&finalized);
  if (running && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string wait = comm::current_wait();
  std::string where =
      wait.empty() ? std::string("It is in no wait that distop watches") +
                         (comm::watchdog_watches_mpi_calls()
                              ? ""
                              : " (a blocking MPI call is watched only in a program linked with "
                                "distop::watchdog)")
                   : "It waits in " + wait;
  char line[512];
  std::snprintf(line, sizeof line,
                "distop: rank %d (pid %d): %s came %.1f s ago and no step boundary was reached "
                "since (DISTOP_SIGNAL_GRACE_SECONDS=%g); ending the process with exit status %d. ",
                rank, static_cast<int>(::getpid()),
                signo == SIGINT    ? "SIGINT"
                : signo == SIGTERM ? "SIGTERM"
                                   : "a signal",
                waited, grace, 128 + signo);
  // One write, so that the lines of several ranks do not interleave.
  const std::string text = line + where + "\n";
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  // mpiexec ends the other ranks once this one has gone, and drops what they wrote but it has not
  // forwarded yet: a pause lets their own lines (their periods end at about the same time) out.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(128 + signo);
}

void watch(double grace) {
  while (::sem_wait(&g_signalled) != 0 && errno == EINTR) {
  }
  std::unique_lock<std::mutex> lock(g_mutex);
  if (g_closing) return;
  const std::int64_t signalled = now_ns();
  std::int64_t expected = 0;
  g_boundary_ns.compare_exchange_strong(expected, signalled);  // unless a boundary came first
  const auto period = static_cast<std::int64_t>(grace * 1e9);
  for (;;) {
    const std::int64_t left = g_boundary_ns.load() + period - now_ns();
    if (left <= 0) break;
    g_wake.wait_for(lock, std::chrono::nanoseconds(left));
    if (g_closing) return;
  }
  lock.unlock();
  end_process(static_cast<int>(g_received), static_cast<double>(now_ns() - signalled) * 1e-9,
              grace);
}

}  // namespace

double StopSignals::grace_seconds() {
  const char* v = std::getenv("DISTOP_SIGNAL_GRACE_SECONDS");
  if (v == nullptr || *v == '\0') return kDefaultGraceSeconds;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(s) || s < 0) {
    std::fprintf(stderr,
                 "distop: DISTOP_SIGNAL_GRACE_SECONDS='%s' is not a number of seconds >= 0; using "
                 "%g\n",
                 v, kDefaultGraceSeconds);
    return kDefaultGraceSeconds;
  }
  return s;
}

StopSignals::StopSignals() {
  g_received = 0;
  g_boundary_ns.store(0);
  g_closing = false;
  ::sem_init(&g_signalled, 0, 0);
  const double grace = grace_seconds();
  if (grace > 0) g_watcher = std::thread(watch, grace);
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
  if (g_watcher.joinable()) {
    {
      const std::lock_guard<std::mutex> lock(g_mutex);
      g_closing = true;
    }
    g_wake.notify_all();
    ::sem_post(&g_signalled);
    g_watcher.join();
  }
  ::sem_destroy(&g_signalled);
}

int StopSignals::received() noexcept {
  const int signo = static_cast<int>(g_received);
  if (signo != 0) g_boundary_ns.store(now_ns());
  return signo;
}

}  // namespace distop::train
