#pragma once
// A timeline of a run, for Perfetto (ui.perfetto.dev) or chrome://tracing: every operator's forward
// and adjoint (the spans of core/timers.hpp), every layer's computation, forward and backward,
// every wait the hang watchdog watches (comm/watchdog.hpp: distop's waits, and every blocking MPI
// call in a program linked with distop::watchdog), the phases that train::fit marks (each step,
// its forward, backward and optimizer step), and data parallelism's bucket reductions, as Chrome
// trace event JSON with one track (pid) per rank.
//
//   {"traceEvents": [
//     {"name": "rank 0", "ph": "M", "pid": 0, ...},          a track's name
//     {"name": "Broadcast", "cat": "op", "ph": "X", "pid": 0, "tid": 0, "ts": 12.5, "dur": 3.25},
//     ...], "displayTimeUnit": "ms"}
//
// "ts" and "dur" are microseconds from the moment start() returned, which the ranks leave together
// (a barrier), so the tracks line up to the barrier's skew (microseconds on one node). Categories,
// on row (tid) 0 of a rank's track unless said otherwise:
//   "step", "phase"  train::fit's steps and their load, forward, backward and optimizer phases;
//   "op"             a linear operator's forward (named by the operator: "Broadcast");
//   "adjoint"        a linear operator's adjoint replayed by backward ("Broadcast.adjoint");
//   "compute"        a layer's or function's forward (a module by the path it is registered under
//                    in its parents, "conv1" or "features.0 Conv", else by its type, "Conv"; a
//                    function by its name, "relu"), enclosing the operators it applies; and, in
//                    backward, the replay of every tape entry that is not an operator's, named
//                    after the layer that recorded it (or the function, or the entry's name);
//   "wait"           an MPI call or a polling wait;
//   "bucket"         row 1: a data-parallel bucket's reduction (parallel::DataParallel), from
//                    its launch (its last gradient ready) until distop sees it complete, named
//                    "bucket 3 (1.0 MiB, 4 tensors)"; it overlaps the backward events of row 0.
// The events of row 0 nest by time: a wait inside an operator inside a layer inside a phase inside
// a step.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace distop::trace {

// Starts recording on every rank of `comm` (collective: a barrier, then each rank's time origin),
// discarding any earlier events, and turns distop's timers on (timers::enable). At most
// max_events events are kept per rank (the rest are counted and reported in the file's metadata).
void start(MPI_Comm comm = MPI_COMM_WORLD, std::size_t max_events = 4'000'000);
namespace detail {
inline bool g_active = false;
inline const char* g_label = nullptr;  // the innermost open Compute span's label
}  // namespace detail

// Whether start() was called and stop_and_write() not yet.
inline bool active() noexcept { return detail::g_active; }
// Records one complete event of category `category` (a string literal) on row `tid` of this rank's
// track (0: the nested events; 1: the buckets, see above). Local.
void record(const char* category, const std::string& name,
            std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end,
            int tid = 0);
// Stops recording and writes every rank's events to `path` on rank 0 of `comm` (collective: the
// events are gathered there), through a temporary file beside it ("<path>.tmp.<pid>") renamed
// over `path` once complete and flushed to disk. If the file cannot be written (a full disk, a
// directory that refuses files), throws distop::Error (op "trace") on every rank naming the OS's
// reason ("No space left on device"), and leaves `path` as it was and no partial file.
void stop_and_write(const std::string& path, MPI_Comm comm = MPI_COMM_WORLD);

// Records its own lifetime as an event of `category` when tracing, and adds it to the timers
// (timers::add) under `name` when they are on.
class Span {
 public:
  Span(const char* category, std::string name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* category_;
  bool on_;
  std::string name_;
  std::chrono::steady_clock::time_point begin_;
};

// A layer's or function's forward computation: records its own lifetime as a "compute" event when
// tracing (and nothing else: not a timer), and labels the tape entries recorded meanwhile, so that
// their replay by backward is named after it (label()). Not tracing, it costs one branch: no
// string is built and nothing is allocated.
class Compute {
 public:
  // A function's computation, named `name` (a string literal, "relu"). It labels the tape entries
  // only when no other Compute span is open (a function inside a layer leaves them the layer's).
  explicit Compute(const char* name) : on_(active()) {
    if (on_) open(name, false);
  }
  // A module's forward: named by `path`, the path it is registered under in its parents (as
  // nn::Module keeps it), or by `type` (a string literal, "Conv") for a module registered nowhere;
  // a path whose last part is a number (a Sequential's step) is followed by the type. It labels
  // the tape entries recorded until it ends.
  Compute(const char* type, const std::string& path) : on_(active()) {
    if (on_) open(type, path);
  }
  ~Compute() {
    if (on_) close();
  }
  Compute(const Compute&) = delete;
  Compute& operator=(const Compute&) = delete;

  // The label of the innermost open span that labels tape entries, or nullptr (none open, or not
  // tracing).
  static const char* label() noexcept { return detail::g_label; }

 private:
  void open(const char* name, bool labels);
  void open(const char* type, const std::string& path);
  void close();

  bool on_;
  bool labels_ = false;
  const char* outer_ = nullptr;  // the label before this span
  std::string name_;
  std::chrono::steady_clock::time_point begin_;
};

}  // namespace distop::trace
