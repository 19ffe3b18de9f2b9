#pragma once
// A timeline of a run, for Perfetto (ui.perfetto.dev) or chrome://tracing: every operator's forward
// and adjoint (the spans of core/timers.hpp), every blocking MPI call and distop wait (the hang
// watchdog's, comm/watchdog.hpp), and the phases that train::fit marks (each step, its forward,
// backward and optimizer step), as Chrome trace event JSON with one track (pid) per rank.
//
//   {"traceEvents": [
//     {"name": "rank 0", "ph": "M", "pid": 0, ...},          a track's name
//     {"name": "Broadcast", "cat": "op", "ph": "X", "pid": 0, "tid": 0, "ts": 12.5, "dur": 3.25},
//     ...], "displayTimeUnit": "ms"}
//
// "ts" and "dur" are microseconds from the moment start() returned, which the ranks leave together
// (a barrier), so the tracks line up to the barrier's skew (microseconds on one node). Categories:
// "step" and "phase" (train::fit), "op" (an operator's forward), "adjoint" (a tape entry replayed
// by backward), "wait" (an MPI call or a polling wait). Events nest by time: a wait inside an
// operator inside a phase inside a step.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace distop::trace {

// Starts recording on every rank of `comm` (collective: a barrier, then each rank's time origin),
// discarding any earlier events, and turns distop's timers on (timers::enable). At most
// max_events events are kept per rank (the rest are counted and reported in the file's metadata).
void start(MPI_Comm comm = MPI_COMM_WORLD, std::size_t max_events = 4'000'000);
// Whether start() was called and stop_and_write() not yet.
bool active() noexcept;
// Records one complete event of category `category` (a string literal) on this rank. Local.
void record(const char* category, const std::string& name,
            std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end);
// Stops recording and writes every rank's events to `path` on rank 0 of `comm` (collective: the
// events are gathered there). Throws distop::Error (op "trace") on every rank if the file cannot
// be written.
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

}  // namespace distop::trace
