#pragma once
// What the MPI benchmarks (bench_collectives, bench_movement) share: a case timed against its raw
// MPI counterpart, the row it yields with the pass rule, and the table or CSV it is printed as.

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "bench_util.hpp"
#include "distop/dist/dist_tensor.hpp"

namespace distop::bench {

// The targets: at 64 KiB and above distop takes at most 1.05 times the raw call; below, at most
// 2 microseconds more.
constexpr std::int64_t kLargeBytes = 64 * 1024;
constexpr double kLargeRatio = 1.05;
constexpr double kSmallSlackUs = 2.0;

struct Case {
  std::string op;
  std::string direction;
  std::function<void()> distop;
  std::function<void()> raw;
};

struct Row {
  std::string op;
  std::string direction;
  std::int64_t bytes = 0;
  int ranks = 0;
  int reps = 0;
  double distop_us = 0;
  double mpi_us = 0;
  double ratio() const { return distop_us / mpi_us; }
  bool pass() const {
    return bytes >= kLargeBytes ? ratio() <= kLargeRatio : distop_us <= mpi_us + kSmallSlackUs;
  }
};

inline Row measure_row(MPI_Comm comm, int reps, double budget_s, const Case& c,
                       std::int64_t bytes) {
  // Only the large sizes are scaled down: below 64 KiB even a preempted warm-up must not cut them.
  const auto m = measure_pairs([&](int n) { return time_pairs_mpi(comm, n, c.distop, c.raw); },
                               reps, budget_s, bytes >= kLargeBytes);
  int size = 0;
  MPI_Comm_size(comm, &size);
  return Row{c.op, c.direction, bytes, size, m.reps, m.median_a_us(), m.median_b_us()};
}

// The text table's columns.
inline const Table& mpi_table() {
  static const Table t({{"op", 18, true},
                        {"dir", 8, true},
                        {"bytes", 10},
                        {"ranks", 5},
                        {"distop_us", 12},
                        {"mpi_us", 10},
                        {"ratio", 7, false, 3},
                        {"pass", 4, true, 0, 2},
                        {"reps", 5}});
  return t;
}

// A table row, or with csv the row `op,direction,bytes,ranks,distop_us,mpi_us,ratio`.
inline void print_row(bool csv, const Row& r) {
  if (csv) {
    std::printf("%s,%s,%lld,%d,%.3f,%.3f,%.4f\n", r.op.c_str(), r.direction.c_str(),
                static_cast<long long>(r.bytes), r.ranks, r.distop_us, r.mpi_us, r.ratio());
    std::fflush(stdout);
  } else {
    mpi_table().row({r.op, r.direction, static_cast<long long>(r.bytes),
                     static_cast<long long>(r.ranks), r.distop_us, r.mpi_us, r.ratio(),
                     std::string(r.pass() ? "pass" : "FAIL"), static_cast<long long>(r.reps)});
  }
}

inline void fill(DistTensor<float>& t, float value) {
  std::fill(t.data(), t.data() + t.local_numel(), value);
}

}  // namespace distop::bench
