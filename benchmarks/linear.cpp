// bench_linear: distop's local nn::Linear<float> (on Partition::self()), forward, backward and
// forward+backward through the tape, timed against direct cblas_sgemm calls of the same GEMMs.
//
// Run:  mpiexec.mpich -n 1 build/benchmarks/bench_linear [--csv] [--reps N] [--gemm-only-baseline]
//                                                        [--shapes 64x784x256 ...] [--simd-cap B]
//
// Shapes: batch 64 and 256 with (in, out) = (784, 256), (256, 128), (128, 10) (an MLP on MNIST)
// and (1024, 1024). The input x [batch, in] requires a gradient, as a hidden layer's does.
//
// Passes, each repetition a full step of what it names:
//   forward   distop: y = layer.forward(tape, x) (recorded), then the tape is cleared and y dies.
//             BLAS:   y = x W^T                      1 GEMM
//   backward  distop: tape.backward() after an untimed forward with dL/dy seeded (fresh dW, db and
//                     dx gradients are made, as after an optimizer's zero_grad).
//             BLAS:   dW = dy^T x, dx = dy W        2 GEMMs
//   fwd+bwd   distop: forward, seed dL/dy, backward, then zero_grad of W, b and x.
//             BLAS:   the 3 GEMMs above
// The layer computes y = x W^T + b, so the baseline does the bias work too, as plain loops after
// the GEMMs (y += b after the forward GEMM, db = column sums of dy beside the backward ones): the
// same computation written directly against BLAS. The loops are compiled for the widest vectors
// the CPU has (DISTOP_BENCH_VECTOR_CLONES), as distop's bias kernels are. --gemm-only-baseline
// drops those loops, so that the baseline is the GEMMs alone and distop's bias work counts against
// it (the stricter comparison, shown for information).
//
// GFLOP/s counts 2 m n k per GEMM (the bias is not counted). Timing: each repetition is timed with
// steady_clock; distop and BLAS repetitions are interleaved, alternating which goes first. After a
// warm-up of 3 to 10 pairs (about 0.1 s), each case runs --reps repetitions (default 500), fewer
// where the warm-up predicts more than --budget seconds (default 1), but never fewer than 50. The
// table reports medians; ratio = distop GFLOP/s / BLAS GFLOP/s = blas_us / distop_us.
//
// Target (the pass column): ratio >= 0.9.
//
// Two things outside distop move these figures on some machines:
// - OpenBLAS 0.3.21 (Debian bookworm) does not recognise every recent CPU and then falls back to
//   its Prescott kernels (about 30 instead of 100-145 GFLOP/s); libdistop switches it to the CPU's
//   widest kernels when it loads, unless OPENBLAS_CORETYPE names others, and the BLAS baseline here
//   runs the same kernels. The header line names them.
// - distop allocates fresh outputs and gradients every step, as PyTorch does. glibc returns freed
//   memory at the top of the heap to the system once more than its trim threshold is free, so a
//   step that frees all it allocated can page-fault its memory back in on every repetition (seen
//   in fwd+bwd at 256x256x128). GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:
//   glibc.malloc.mmap_threshold=33554432 (or the same through mallopt) shows the difference.
#include "distop/nn/linear.hpp"

#include <cblas.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"

namespace {

namespace bench = distop::bench;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::TensorSpace;
using distop::Var;
using distop::nn::Linear;

constexpr double kTargetRatio = 0.9;

struct Settings {
  int reps = 500;
  double budget_s = 1.0;
  bool csv = false;
  bool gemm_only_baseline = false;  // the baseline without the bias loops
  std::vector<std::string> shapes;  // "BATCHxINxOUT"; empty: the default set
};

struct Shape3 {
  std::int64_t batch, in, out;
};

struct Case {
  std::string pass;
  int gemms = 0;
  std::function<void()> setup;  // untimed, before each distop repetition (may be empty)
  std::function<void()> distop;
  std::function<void()> blas;
};

struct Row {
  std::string pass;
  Shape3 shape{};
  int gemms = 0;
  int reps = 0;
  double distop_us = 0;
  double blas_us = 0;
  double flops() const {
    return gemms * 2.0 * static_cast<double>(shape.batch * shape.in * shape.out);
  }
  double distop_gflops() const { return flops() / distop_us * 1e-3; }
  double blas_gflops() const { return flops() / blas_us * 1e-3; }
  double ratio() const { return blas_us / distop_us; }
  bool pass_target() const { return ratio() >= kTargetRatio; }
};

Row measure(const Settings& s, const Case& c, const Shape3& shape) {
  auto run_distop = [&c] {
    if (c.setup) c.setup();
    return bench::time_one(c.distop);
  };
  auto run_blas = [&c] { return bench::time_one(c.blas); };
  const auto m = bench::measure_pairs(
      [&](int n) { return bench::interleave(n, run_distop, run_blas); }, s.reps, s.budget_s);
  return Row{c.pass, shape, c.gemms, m.reps, m.median_a_us(), m.median_b_us()};
}

void fill_random(float* p, std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < n; ++i) p[i] = u(gen);
}

// y[i, j] += b[j]
DISTOP_BENCH_VECTOR_CLONES
void add_bias(float* __restrict y, const float* __restrict b, std::int64_t rows, std::int64_t n) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < n; ++j) y[i * n + j] += b[j];
}
// db[j] = sum_i dy[i, j]
DISTOP_BENCH_VECTOR_CLONES
void column_sums(const float* __restrict dy, float* __restrict db, std::int64_t rows,
                 std::int64_t n) {
  std::fill(db, db + n, 0.0f);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < n; ++j) db[j] += dy[i * n + j];
}

double max_rel_diff(const float* a, const std::vector<float>& b) {
  double diff = 0;
  double scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// The text table's columns.
const bench::Table& table() {
  static const bench::Table t({{"pass", 8, true},
                               {"batch", 5},
                               {"in", 5},
                               {"out", 5},
                               {"distop_us", 11},
                               {"blas_us", 11},
                               {"distop", 8, false, 1},
                               {"blas", 8, false, 1},
                               {"ratio", 6, false, 3},
                               {"pass", 4, true, 0, 2},
                               {"reps", 5}});
  return t;
}

void print_row(const Settings& s, const Row& r) {
  if (s.csv) {
    std::printf("Linear,%s,%lld,%lld,%lld,%.3f,%.3f,%.4f\n", r.pass.c_str(),
                static_cast<long long>(r.shape.batch), static_cast<long long>(r.shape.in),
                static_cast<long long>(r.shape.out), r.distop_us, r.blas_us, r.ratio());
    std::fflush(stdout);
  } else {
    table().row({r.pass, static_cast<long long>(r.shape.batch), static_cast<long long>(r.shape.in),
                 static_cast<long long>(r.shape.out), r.distop_us, r.blas_us, r.distop_gflops(),
                 r.blas_gflops(), r.ratio(), std::string(r.pass_target() ? "pass" : "FAIL"),
                 static_cast<long long>(r.reps)});
  }
}

// Times the three passes for one shape; returns their rows.
std::vector<Row> bench_shape(const Settings& s, const Shape3& sh) {
  const std::int64_t m = sh.batch, k = sh.in, n = sh.out;
  const int mi = static_cast<int>(m), ki = static_cast<int>(k), ni = static_cast<int>(n);
  Linear<float> layer(k, n, {.seed = 2024});
  const Partition self = Partition::self();
  const TensorSpace xs(self, distop::Decomposition::balanced(Shape{m, k}, self.shape(), {0, -1}));
  const TensorSpace ys = xs.with_extent(1, n);
  DistTensor<float> x_value(xs);
  fill_random(x_value.data(), x_value.local_numel(), 1);
  DistTensor<float> dy(ys);
  fill_random(dy.data(), dy.local_numel(), 2);
  Var<float> x(x_value, true);
  Var<float>& w = layer.weight();
  Var<float>& b = layer.bias();
  const float* const xp = x_value.data();
  const float* const wp = w.value().data();
  const float* const bp = b.value().data();
  const float* const dyp = dy.data();

  // The baseline's outputs, allocated once.
  std::vector<float> y_buf(static_cast<std::size_t>(m * n));
  std::vector<float> dw_buf(static_cast<std::size_t>(n * k));
  std::vector<float> db_buf(static_cast<std::size_t>(n));
  std::vector<float> dx_buf(static_cast<std::size_t>(m * k));
  const bool bias = !s.gemm_only_baseline;
  auto blas_forward = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mi, ni, ki, 1.0f, xp, ki, wp, ki, 0.0f,
                y_buf.data(), ni);
    if (bias) add_bias(y_buf.data(), bp, m, n);
  };
  auto blas_backward = [&] {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ni, ki, mi, 1.0f, dyp, ni, xp, ki, 0.0f,
                dw_buf.data(), ki);
    if (bias) column_sums(dyp, db_buf.data(), m, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ki, ni, 1.0f, dyp, ni, wp, ki, 0.0f,
                dx_buf.data(), ki);
  };

  Tape tape;
  auto zero_grads = [&] {
    w.zero_grad();
    b.zero_grad();
    x.zero_grad();
  };
  // Forward, then dL/dy = dy (the gradient shares dy's storage, which nothing writes to).
  Var<float> held_y;
  auto forward_seeded = [&] {
    held_y = layer.forward(tape, x);
    held_y.accumulate_grad(dy);
  };

  // Check once that both sides compute the same thing.
  forward_seeded();
  tape.backward();
  blas_forward();
  if (!bias) add_bias(y_buf.data(), bp, m, n);
  blas_backward();
  column_sums(dyp, db_buf.data(), m, n);
  const double err =
      std::max({max_rel_diff(held_y.value().data(), y_buf), max_rel_diff(w.grad().data(), dw_buf),
                max_rel_diff(b.grad().data(), db_buf), max_rel_diff(x.grad().data(), dx_buf)});
  DISTOP_CHECK(err < 1e-4, "bench_linear", "distop and BLAS disagree by ", err, " for batch ", m,
               ", in ", k, ", out ", n);
  zero_grads();
  held_y = Var<float>();

  const std::vector<Case> cases{
      {"forward",
       1,
       {},
       [&] {
         Var<float> y = layer.forward(tape, x);
         tape.clear();
       },
       blas_forward},
      {"backward", 2,
       [&] {
         zero_grads();
         forward_seeded();
       },
       [&] { tape.backward(); }, blas_backward},
      {"fwd+bwd",
       3,
       {},
       [&] {
         forward_seeded();
         tape.backward();
         zero_grads();
         held_y = Var<float>();
       },
       [&] {
         blas_forward();
         blas_backward();
       }},
  };
  std::vector<Row> rows;
  for (const auto& c : cases) {
    rows.push_back(measure(s, c, sh));
    print_row(s, rows.back());
    zero_grads();
    held_y = Var<float>();
    tape.clear();
  }
  return rows;
}

int run(const Settings& s) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    std::fprintf(stderr, "bench_linear times one process; run it with mpiexec -n 1\n");
    return 1;
  }
  if constexpr (!distop::kHostAccessible) {
    std::fprintf(stderr, "bench_linear compares against host cblas; tensors here live on a GPU\n");
    return 1;
  }
  std::vector<Shape3> shapes{{64, 784, 256},  {64, 256, 128},  {64, 128, 10},  {64, 1024, 1024},
                             {256, 784, 256}, {256, 256, 128}, {256, 128, 10}, {256, 1024, 1024}};
  if (!s.shapes.empty()) {
    shapes.clear();
    for (const auto& text : s.shapes) {
      long long bt = 0, in = 0, out = 0;
      char tail = 0;
      if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &bt, &in, &out, &tail) != 3 || bt < 1 ||
          in < 1 || out < 1) {
        std::fprintf(stderr, "bench_linear: --shapes expects BATCHxINxOUT, found '%s'\n",
                     text.c_str());
        return 1;
      }
      shapes.push_back({bt, in, out});
    }
  }
  if (s.csv) {
    std::printf("layer,pass,batch,in,out,distop_us,blas_us,ratio\n");
  } else {
#ifdef DISTOP_HAVE_OPENBLAS
    std::printf(
        "# bench_linear: nn::Linear<float> on Partition::self(), 1 process, OpenBLAS %s, %d "
        "thread(s)\n",
        openblas_get_corename(), openblas_get_num_threads());
#else
    std::printf("# bench_linear: nn::Linear<float> on Partition::self(), 1 process\n");
#endif
    std::printf("# baseline: cblas_sgemm of the same GEMMs (forward 1, backward 2, fwd+bwd 3)%s\n",
                !s.gemm_only_baseline
                    ? " plus plain loops for the bias (y += b, db = column sums)"
                    : "; bias work counted in distop only (--gemm-only-baseline)");
    std::printf("# distop's vector kernels: %d-byte\n", distop::kernels::host_simd_bytes());
    std::printf(
        "# GFLOP/s = 2 m n k per GEMM / median time; ratio = distop / blas GFLOP/s; "
        "pass: ratio >= %.2f\n",
        kTargetRatio);
    table().header();
  }
  int rows = 0;
  int passed = 0;
  for (const auto& sh : shapes) {
    for (const auto& r : bench_shape(s, sh)) {
      ++rows;
      if (r.pass_target()) ++passed;
    }
  }
  if (!s.csv) std::printf("# %d of %d rows pass\n", passed, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);

  Settings s;
  CLI::App app{"Times distop's local nn::Linear<float> against direct cblas_sgemm"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/false);
  app.add_flag("--csv", s.csv, "print layer,pass,batch,in,out,distop_us,blas_us,ratio rows");
  app.add_option(
      "--shapes", s.shapes,
      "shapes to time, as BATCHxINxOUT (default: batch 64 and 256 with 784x256, 256x128, "
      "128x10 and 1024x1024)");
  app.add_flag("--gemm-only-baseline", s.gemm_only_baseline,
               "leave the bias loops out of the BLAS baseline (the GEMMs alone)");
  bench::add_simd_cap_option(app);
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;

  return bench::run_or_abort([&] { return run(s); });
}
