// bench_softmax: the row kernels of kernels/softmax.hpp (a team of threads per row) timed against
// the one-thread-per-row form they replaced, on rows of 10 to 65,536 classes.
//
// Run:  mpiexec.mpich -n 1 build/benchmarks/bench_softmax [--csv] [--reps N] [--budget S]
//                                                         [--shapes ROWSxCLASSES ...]
//
// Kernels (float logits [rows, classes], statistics in double in both forms):
//   softmax        kernels::softmax: probs = softmax(logits)
//   cross_entropy  kernels::softmax_cross_entropy with probs: the loss and the probabilities, as
//                  loss::cross_entropy's forward pass computes them
// Baseline: the same computation as a Kokkos RangePolicy with one thread per row (each thread finds
// its row's maximum, sums exp(x - max) and writes its row; the labels checked and uploaded per call
// as distop's call does), which is what these kernels were before they took a team per row: on a
// GPU one thread per row leaves a long row to one thread. On the host (Serial: a team is one
// thread) the two forms do the same arithmetic, so the table shows what the team form costs there
// (ratio = row_thread_us / distop_us; below 1, the team form is slower).
//
// Shapes: 64 x 10 and 256 x 10 (classification), 64 x 100, 64 x 1000, 16 x 10,000 and 8 x 65,536.
// Timing: steady_clock around each call; distop and baseline repetitions interleaved, alternating
// which goes first; a warm-up of 3 to 10 pairs (about 0.1 s), then --reps repetitions (default
// 2000), fewer where the warm-up predicts more than --budget seconds (default 0.5), never fewer
// than 50. The table reports medians. Both sides write their own outputs, which stay allocated.
#include "distop/kernels/softmax.hpp"

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"
#include "distop/core/random.hpp"
#include "distop/core/tensor.hpp"

namespace {

namespace bench = distop::bench;
using distop::ExecSpace;
using distop::Shape;
using distop::Tensor;
namespace kernels = distop::kernels;

// Kokkos' math functions, which device code can call (in Kokkos::Experimental before 3.7).
namespace kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::exp;
using Kokkos::log;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
#endif
}  // namespace kmath

struct Settings {
  int reps = 2000;
  double budget_s = 0.5;
  bool csv = false;
  std::vector<std::string> shapes;
};

// The maximum of row r and the sum of exp(x - max) over it, by one thread.
template <class V>
KOKKOS_INLINE_FUNCTION void row_stats(const V& x, std::int64_t r, std::int64_t classes, double& max,
                                      double& sum_exp) {
  const std::int64_t base = r * classes;
  max = static_cast<double>(x(base));
  for (std::int64_t j = 1; j < classes; ++j) {
    const double v = static_cast<double>(x(base + j));
    if (v > max) max = v;
  }
  sum_exp = 0;
  for (std::int64_t j = 0; j < classes; ++j)
    sum_exp += kmath::exp(static_cast<double>(x(base + j)) - max);
}

// The one-thread-per-row softmax (the former kernels::softmax).
void softmax_row_per_thread(const Tensor<float>& logits, Tensor<float>& probs) {
  const std::int64_t rows = logits.extent(0), classes = logits.extent(1);
  auto xv = logits.view();
  auto pv = probs.view();
  Kokkos::parallel_for(
      "bench::softmax_row_per_thread", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(std::int64_t r) {
        double max, sum_exp;
        row_stats(xv, r, classes, max, sum_exp);
        for (std::int64_t j = r * classes; j < (r + 1) * classes; ++j)
          pv(j) = static_cast<float>(kmath::exp(static_cast<double>(xv(j)) - max) / sum_exp);
      });
}

using LabelView = Kokkos::View<std::int32_t*, distop::MemSpace>;

// The labels checked and copied to where the kernels run, as softmax_cross_entropy does per call.
LabelView upload_labels(const std::vector<std::int32_t>& labels, std::int64_t classes) {
  for (std::size_t r = 0; r < labels.size(); ++r)
    DISTOP_CHECK(labels[r] >= 0 && labels[r] < classes, "bench_softmax", "label out of range");
  LabelView v(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bench::labels"), labels.size());
  Kokkos::deep_copy(
      v,
      Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
          labels.data(), labels.size()));
  return v;
}

// The one-thread-per-row cross-entropy with probabilities (the former softmax_cross_entropy).
double cross_entropy_row_per_thread(const Tensor<float>& logits,
                                    const std::vector<std::int32_t>& label_values,
                                    Tensor<float>& probs) {
  const std::int64_t rows = logits.extent(0), classes = logits.extent(1);
  const LabelView labels = upload_labels(label_values, classes);
  auto xv = logits.view();
  auto pv = probs.view();
  double loss = 0;
  Kokkos::parallel_reduce(
      "bench::cross_entropy_row_per_thread", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(std::int64_t r, double& acc) {
        double max, sum_exp;
        row_stats(xv, r, classes, max, sum_exp);
        const std::int64_t base = r * classes;
        acc += kmath::log(sum_exp) - (static_cast<double>(xv(base + labels(r))) - max);
        for (std::int64_t j = base; j < base + classes; ++j)
          pv(j) = static_cast<float>(kmath::exp(static_cast<double>(xv(j)) - max) / sum_exp);
      },
      loss);
  return loss;
}

bench::Table table() {
  return bench::Table({{"kernel", 14, true},
                       {"rows", 6},
                       {"classes", 8},
                       {"distop_us", 10, false, 2},
                       {"row_thread_us", 13, false, 2},
                       {"ratio", 6, false, 2}});
}

void bench_shape(const Settings& s, std::int64_t rows, std::int64_t classes) {
  const Shape shape{rows, classes};
  std::vector<float> values(static_cast<std::size_t>(rows * classes));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(8 * distop::random::uniform(7, i) - 4);
  const auto logits = Tensor<float>::from_vector(shape, values);
  Tensor<float> probs(shape), probs_ref(shape);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < labels.size(); ++r)
    labels[r] = static_cast<std::int32_t>(r % static_cast<std::size_t>(classes));

  // Both forms must agree before they are timed.
  kernels::softmax(logits, probs);
  softmax_row_per_thread(logits, probs_ref);
  const double loss = kernels::softmax_cross_entropy(logits, labels, &probs);
  const double loss_ref = cross_entropy_row_per_thread(logits, labels, probs_ref);
  Kokkos::fence();
  const auto p = probs.to_vector(), q = probs_ref.to_vector();
  for (std::size_t i = 0; i < p.size(); ++i)
    DISTOP_CHECK(std::abs(p[i] - q[i]) <= 1e-6f, "bench_softmax", "the forms disagree at ", i);
  DISTOP_CHECK(std::abs(loss - loss_ref) <= 1e-9 * std::abs(loss_ref) + 1e-9, "bench_softmax",
               "the losses disagree: ", loss, " and ", loss_ref);

  struct Case {
    const char* name;
    std::function<void()> distop, baseline;
  };
  const std::vector<Case> cases{
      {"softmax", [&] { kernels::softmax(logits, probs); },
       [&] { softmax_row_per_thread(logits, probs_ref); }},
      {"cross_entropy", [&] { (void)kernels::softmax_cross_entropy(logits, labels, &probs); },
       [&] { (void)cross_entropy_row_per_thread(logits, labels, probs_ref); }},
  };
  for (const auto& c : cases) {
    auto time = [](const std::function<void()>& f) {
      return [&f] {
        return bench::time_one([&] {
          f();
          Kokkos::fence();
        });
      };
    };
    const auto m = bench::measure_pairs(
        [&](int reps) { return bench::interleave(reps, time(c.distop), time(c.baseline)); }, s.reps,
        s.budget_s);
    const double d = m.median_a_us(), b = m.median_b_us();
    if (s.csv)
      std::printf("%s,%lld,%lld,%.3f,%.3f,%.3f\n", c.name, static_cast<long long>(rows),
                  static_cast<long long>(classes), d, b, b / d);
    else
      table().row({std::string(c.name), static_cast<long long>(rows),
                   static_cast<long long>(classes), d, b, b / d});
  }
}

int run(const Settings& s) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    std::fprintf(stderr, "bench_softmax times one process; run it with mpiexec -n 1\n");
    return 1;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes{{64, 10},   {256, 10},   {64, 100},
                                                            {64, 1000}, {16, 10000}, {8, 65536}};
  if (!s.shapes.empty()) {
    shapes.clear();
    for (const auto& text : s.shapes) {
      long long rows = 0, classes = 0;
      char tail = 0;
      if (std::sscanf(text.c_str(), "%lldx%lld%c", &rows, &classes, &tail) != 2 || rows < 1 ||
          classes < 1) {
        std::fprintf(stderr, "bench_softmax: --shapes expects ROWSxCLASSES, found '%s'\n",
                     text.c_str());
        return 1;
      }
      shapes.emplace_back(rows, classes);
    }
  }
  if (s.csv) {
    std::printf("kernel,rows,classes,distop_us,row_thread_us,ratio\n");
  } else {
    std::printf("# bench_softmax: float logits, Kokkos %s, 1 process\n", ExecSpace::name());
    std::printf(
        "# distop: a team per row; row_thread: one thread per row (the former kernels); "
        "ratio = row_thread_us / distop_us\n");
    table().header();
  }
  for (const auto& [rows, classes] : shapes) bench_shape(s, rows, classes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  Settings s;
  CLI::App app{"Times distop's team-per-row softmax kernels against one thread per row"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/false);
  app.add_flag("--csv", s.csv, "print kernel,rows,classes,distop_us,row_thread_us,ratio rows");
  app.add_option("--shapes", s.shapes,
                 "shapes to time, as ROWSxCLASSES (default: 64x10, 256x10, 64x100, 64x1000, "
                 "16x10000, 8x65536)");
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  return bench::run_or_abort([&] { return run(s); });
}
