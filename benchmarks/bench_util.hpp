#pragma once
// What the benchmark programs share: the median, interleaved timing of a distop case against its
// baseline (one process with steady_clock, or every rank of a communicator with a barrier before
// each repetition and the maximum over the ranks), the warm-up and repetition-count rule, the size
// ladder, and the fixed-width table.
//
// The rule (every program states it in its own header comment): distop and baseline repetitions
// are interleaved, alternating which goes first, so that drift in the machine's speed hits both
// alike. A warm-up of 3 to 10 pairs (about 0.1 s) comes first; then `reps` repetitions, fewer
// where the fastest warm-up pair predicts more than `budget_s` seconds, but never fewer than 50.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "distop/comm/mpi.hpp"
#include "distop/kernels/simd.hpp"
#include "distop/train/cli.hpp"

// On a plain loop of a baseline: compiled for AVX-512, AVX2 and the build's baseline, the widest
// the CPU runs chosen when the program starts (as distop's own hand-vectorised kernels choose
// theirs), so that a baseline loop is not held to the build's baseline vectors where distop's
// kernel is not.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DISTOP_BENCH_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DISTOP_BENCH_VECTOR_CLONES
#endif

namespace distop::bench {

constexpr int kMinReps = 50;
constexpr int kMinWarmupPairs = 3;
constexpr int kMaxWarmupPairs = 10;
constexpr double kWarmupBudgetS = 0.1;

// The non-empty items of a comma-separated list ("a,b,,c" -> a, b, c).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) v.push_back(x);
  return v;
}

// The median (the mean of the two middle values for an even count).
inline double median(std::vector<double> v) {
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double hi = v[mid];
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

// Seconds that fn takes, by steady_clock.
inline double time_one(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using Times = std::pair<std::vector<double>, std::vector<double>>;

// `reps` interleaved repetitions: time_a() and time_b() each time one repetition of their side and
// return seconds; even repetitions run a first, odd ones b first.
template <class TimeA, class TimeB>
Times interleave(int reps, TimeA&& time_a, TimeB&& time_b) {
  std::vector<double> ta(static_cast<std::size_t>(reps));
  std::vector<double> tb(ta.size());
  for (std::size_t i = 0; i < ta.size(); ++i) {
    if (i % 2 == 0) {
      ta[i] = time_a();
      tb[i] = time_b();
    } else {
      tb[i] = time_b();
      ta[i] = time_a();
    }
  }
  return {std::move(ta), std::move(tb)};
}

// `reps` interleaved repetitions of a and b on every rank of `comm`, each after a barrier on
// `comm`, each rank timing its own call with MPI_Wtime. Returns, per repetition, the maximum over
// the ranks (one MPI_Allreduce(MAX) per side after the loop, outside the timed region), in seconds.
inline Times time_pairs_mpi(MPI_Comm comm, int reps, const std::function<void()>& a,
                            const std::function<void()>& b) {
  auto time_on = [comm](const std::function<void()>& fn) {
    return [comm, &fn] {
      DISTOP_MPI_CHECK(MPI_Barrier(comm), "bench");
      const double t0 = MPI_Wtime();
      fn();
      return MPI_Wtime() - t0;
    };
  };
  auto t = interleave(reps, time_on(a), time_on(b));
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.first.data(), reps, MPI_DOUBLE, MPI_MAX, comm),
                   "bench");
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.second.data(), reps, MPI_DOUBLE, MPI_MAX, comm),
                   "bench");
  return t;
}

struct Measured {
  Times times;
  int reps = 0;
  double median_a_us() const { return median(times.first) * 1e6; }
  double median_b_us() const { return median(times.second) * 1e6; }
};

// The warm-up and repetition rule above. pairs(n) runs n interleaved pairs and returns their
// times (under MPI, the same max-reduced times on every rank, so that every rank picks the same
// counts). may_scale: whether the budget may cut the count (a program can keep small, fast cases
// at the full count, where even a preempted warm-up must not cut it).
template <class Pairs>
Measured measure_pairs(Pairs&& pairs, int reps, double budget_s, bool may_scale = true) {
  const auto [wa, wb] = pairs(kMinWarmupPairs);
  // The fastest warm-up pair, so that one preempted repetition does not cut the count.
  const double pair_s =
      *std::min_element(wa.begin(), wa.end()) + *std::min_element(wb.begin(), wb.end());
  const int more = std::clamp(static_cast<int>(kWarmupBudgetS / pair_s) - kMinWarmupPairs, 0,
                              kMaxWarmupPairs - kMinWarmupPairs);
  if (more > 0) pairs(more);
  if (may_scale && budget_s > 0 && pair_s * reps > budget_s)
    reps = std::max(kMinReps, static_cast<int>(budget_s / pair_s));
  return Measured{pairs(reps), reps};
}

// Sizes in bytes: 8, then the powers of `step` (4: 16, 64, ...; 2: every power of 2) up to
// max_bytes.
inline std::vector<std::int64_t> size_ladder(std::int64_t max_bytes, int step) {
  std::vector<std::int64_t> out;
  for (std::int64_t b = 8; b <= max_bytes; b *= 2) {
    const auto log2 = std::countr_zero(static_cast<std::uint64_t>(b));
    if (b == 8 || step == 2 || log2 % 2 == 0) out.push_back(b);
  }
  return out;
}

// --max-bytes and --step, the options of size_ladder.
inline void add_size_ladder_options(CLI::App& app, std::int64_t& max_bytes, int& step) {
  app.add_option("--max-bytes", max_bytes, "largest tensor, in bytes")
      ->check(CLI::Range(std::int64_t{8}, std::int64_t{1} << 30));
  app.add_option("--step", step, "size step: 4 (8 B, then powers of 4) or 2")
      ->check(CLI::IsMember({2, 4}));
}

// The first line of MPI_Get_library_version.
inline std::string mpi_library_version() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<std::size_t>(len));
  return v.substr(0, v.find('\n'));
}

// A fixed-width text table: every column has a title, a width, an alignment and (for numbers) a
// precision, and is preceded by `gap` spaces (none before the first column). Titles are printed
// with the column's width and alignment; cells are strings, integers or doubles.
class Table {
 public:
  struct Column {
    const char* title;
    int width;
    bool left = false;
    int precision = 2;  // doubles only
    int gap = 1;        // spaces before the column
  };
  using Cell = std::variant<std::string, long long, double>;

  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  void header() const {
    std::string line;
    for (std::size_t i = 0; i < columns_.size(); ++i)
      line += cell(i, std::string(columns_[i].title));
    std::printf("%s\n", line.c_str());
  }
  void row(const std::vector<Cell>& cells) const {
    std::string line;
    for (std::size_t i = 0; i < columns_.size() && i < cells.size(); ++i) line += cell(i, cells[i]);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

 private:
  std::string cell(std::size_t i, const Cell& value) const {
    const Column& c = columns_[i];
    char buf[256];
    if (const auto* s = std::get_if<std::string>(&value)) {
      std::snprintf(buf, sizeof buf, c.left ? "%-*s" : "%*s", c.width, s->c_str());
    } else if (const auto* n = std::get_if<long long>(&value)) {
      std::snprintf(buf, sizeof buf, c.left ? "%-*lld" : "%*lld", c.width, *n);
    } else {
      std::snprintf(buf, sizeof buf, c.left ? "%-*.*f" : "%*.*f", c.width, c.precision,
                    std::get<double>(value));
    }
    return (i == 0 ? std::string() : std::string(static_cast<std::size_t>(c.gap), ' ')) + buf;
  }

  std::vector<Column> columns_;
};

// --simd-cap BYTES: caps the vectors of distop's hand-vectorised kernels
// (kernels::set_host_simd_cap), so that one CPU times each of their forms: 32 the AVX2 ones, 16
// the portable ones, 0 (the default) the widest the CPU has. Applied when the option is parsed.
inline void add_simd_cap_option(CLI::App& app) {
  app.add_option_function<int>(
         "--simd-cap", [](int cap) { kernels::set_host_simd_cap(cap); },
         "cap distop's hand-vectorised kernels at this many bytes (32: AVX2, 16: the portable "
         "ones; 0: no cap)")
      ->check(CLI::IsMember({0, 16, 32, 64}));
}

// --reps and --budget, which every timing program has. A repetition is of a case, or (per_size) of
// a case at one size of a size ladder.
inline void add_repetition_options(CLI::App& app, int& reps, double& budget_s, bool per_size) {
  const std::string unit = per_size ? "case and size" : "case";
  app.add_option("--reps", reps,
                 "repetitions per " + unit + " (fewer for " + (per_size ? "sizes" : "cases") +
                     " over --budget)")
      ->check(CLI::Range(kMinReps, 1000000));
  app.add_option("--budget", budget_s,
                 "seconds per " + unit + " above which repetitions are scaled down, never below " +
                     std::to_string(kMinReps) + " (0: never)")
      ->check(CLI::Range(0.0, 3600.0));
}

// Parses the command line on every rank and agrees it, as the training programs do
// (train::parse_agreed): where it does not parse, asks for --help, or differs between the ranks,
// rank 0 prints the message and every rank gets the exit status to return (2 for a bad flag or one
// that differs between the ranks); otherwise nothing.
inline std::optional<int> parse_args(CLI::App& app, int argc, char** argv) {
  const std::string path = argc > 0 ? argv[0] : "benchmark";
  return train::parse_agreed(argc, argv, app, path.substr(path.find_last_of('/') + 1));
}

// run(), whose exit code it returns; an exception is printed with the rank and aborts every rank
// (another rank may be waiting in a collective for this one).
template <class Run>
int run_or_abort(Run&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace distop::bench
