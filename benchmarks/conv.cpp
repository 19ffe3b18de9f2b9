// bench_conv: distop's local 2-D convolution kernels (kernels::conv_*, im2col/col2im + GEMM) and
// the layer nn::Conv<float> through the tape, timed against direct cblas_sgemm calls of the
// equivalent im2col GEMMs on buffers that are already in GEMM layout.
//
// Run:  mpiexec.mpich -n 1 build/benchmarks/bench_conv [--csv] [--reps N] [--budget S]
//                                                      [--large-batch 16] [--only LAYER]
//                                                      [--method automatic|im2col|bands|direct]
//
// Layers (float, no groups): LeNet-5's conv1 (batch 64, 1 -> 6 channels, 5x5, padding 2, 28x28)
// and conv2 (batch 64, 6 -> 16, 5x5, no padding, 14x14), and a ResNet-sized layer (batch
// --large-batch, default 16, 64 -> 64, 3x3, padding 1, 56x56).
//
// With K = C k_h k_w, P = out_h out_w and N the batch, the baseline is the best a GEMM-based
// convolution could hope for: one GEMM over the whole batch per pass, no im2col, no layout change.
//   forward   distop: kernels::conv_forward (no bias)       BLAS: Y[O, N P]  = W[O, K] Col[K, N P]
//   bwd_in    distop: kernels::conv_backward_input (beta 0) BLAS: dCol[K, N P] = W^T dY[O, N P]
//   bwd_w     distop: kernels::conv_backward_weight (beta 0) BLAS: dW^T[K, O] = Col dY[O, N P]^T
//             (dW^T rather than dW = dY Col^T: OpenBLAS runs it 15-40% faster on these shapes, and
//             distop's kernel computes it so too, then adds its transpose to dW)
//   fwd+bwd   distop: the three kernels above as a training step runs them: the forward pass
//                     keeps its im2col matrices (kernels::ConvColumns) and bwd_w reads them
//                                                            BLAS: the three GEMMs
//   layer     distop: nn::Conv<float> (with bias) forward, seed dL/dy, tape backward (dx, dW and
//                     db), zero_grad                         BLAS: the three GEMMs
// distop does the im2col (forward, bwd_w), the col2im (bwd_in) and, where samples share a GEMM,
// the permutations between [N, O, P] and [O, N P] in its time; the baseline does none of them.
//
// GFLOP/s counts 2 O K N P per GEMM (3 GEMMs for fwd+bwd and layer; the bias is not counted).
// Timing: each repetition is timed with steady_clock; distop and BLAS repetitions are interleaved,
// alternating which goes first. After a warm-up of 3 to 10 pairs (about 0.1 s), each case runs
// --reps repetitions (default 200), fewer where the warm-up predicts more than --budget seconds
// (default 2), but never fewer than 50. The table reports medians; ratio = distop GFLOP/s / BLAS
// GFLOP/s = blas_us / distop_us.
//
// Target: ratio >= 0.7 for the forward + backward throughput, the fwd+bwd and layer rows (the pass
// column). The single passes (forward, bwd_in, bwd_w) show where the time goes, "-" in that
// column: bwd_w alone builds its own im2col or band matrix, which a training step's backward pass
// reads from the forward pass instead.
//
// OpenBLAS 0.3.21 (Debian bookworm) does not recognise every recent CPU and then falls back to its
// Prescott kernels; libdistop switches it to the CPU's widest kernels when it loads (unless
// OPENBLAS_CORETYPE names others), for the baseline's GEMM too. The header line names the kernels.
#include "distop/kernels/conv.hpp"

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
#include "distop/kernels/window.hpp"
#include "distop/nn/conv.hpp"

namespace {

// The options with the layer's seed set (the seed is one of the options).
distop::nn::ConvOptions with_seed(distop::nn::ConvOptions o, std::uint64_t seed) {
  o.seed = seed;
  return o;
}

namespace bench = distop::bench;
namespace kernels = distop::kernels;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
using distop::nn::Conv;
using distop::nn::ConvOptions;

constexpr double kTargetRatio = 0.7;

struct Settings {
  int reps = 200;
  double budget_s = 2.0;
  bool csv = false;
  std::int64_t large_batch = 16;
  std::string only;  // one layer by name; empty: all
  std::string method = "automatic";
};

struct Layer {
  std::string name;
  std::int64_t batch, c, o, h, w, k, pad;
};

struct Case {
  std::string pass;
  int gemms = 0;
  std::function<void()> setup;  // untimed, before each distop repetition (may be empty)
  std::function<void()> distop;
  std::function<void()> blas;
};

struct Row {
  std::string layer;
  std::string pass;
  double gemm_flops = 0;  // one GEMM
  int gemms = 0;
  int reps = 0;
  double distop_us = 0;
  double blas_us = 0;
  double distop_gflops() const { return gemms * gemm_flops / distop_us * 1e-3; }
  double blas_gflops() const { return gemms * gemm_flops / blas_us * 1e-3; }
  double ratio() const { return blas_us / distop_us; }
  // Whether the row carries the target: forward + backward together.
  bool targeted() const { return pass == "fwd+bwd" || pass == "layer"; }
  bool pass_target() const { return ratio() >= kTargetRatio; }
  std::string verdict() const { return !targeted() ? "-" : pass_target() ? "pass" : "FAIL"; }
};

void fill_random(float* p, std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < n; ++i) p[i] = u(gen);
}

Tensor<float> random_tensor(const Shape& s, unsigned seed) {
  auto t = Tensor<float>::uninitialized(s);
  fill_random(t.data(), t.numel(), seed);
  return t;
}

const bench::Table& table() {
  static const bench::Table t({{"layer", 7, true},
                               {"pass", 8, true},
                               {"N", 3},
                               {"C", 3},
                               {"O", 3},
                               {"HxW", 6},
                               {"k", 2},
                               {"gemm m,n,k", 18},
                               {"distop_us", 10},
                               {"blas_us", 10},
                               {"distop", 7, false, 1},
                               {"blas", 7, false, 1},
                               {"ratio", 6, false, 3},
                               {"pass", 4, true, 0, 2},
                               {"reps", 5}});
  return t;
}

void print_row(const Settings& s, const Layer& l, const Row& r) {
  if (s.csv) {
    std::printf("%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%.3f,%.3f,%.4f\n", r.layer.c_str(),
                r.pass.c_str(), static_cast<long long>(l.batch), static_cast<long long>(l.c),
                static_cast<long long>(l.o), static_cast<long long>(l.h),
                static_cast<long long>(l.w), static_cast<long long>(l.k), r.distop_us, r.blas_us,
                r.ratio());
    std::fflush(stdout);
    return;
  }
  const std::int64_t oh = l.h + 2 * l.pad - l.k + 1, ow = l.w + 2 * l.pad - l.k + 1;
  const std::string gemm = std::to_string(l.o) + "," + std::to_string(l.batch * oh * ow) + "," +
                           std::to_string(l.c * l.k * l.k);
  table().row({r.layer, r.pass, static_cast<long long>(l.batch), static_cast<long long>(l.c),
               static_cast<long long>(l.o), std::to_string(l.h) + "x" + std::to_string(l.w),
               static_cast<long long>(l.k), gemm, r.distop_us, r.blas_us, r.distop_gflops(),
               r.blas_gflops(), r.ratio(), r.verdict(), static_cast<long long>(r.reps)});
}

double max_rel_diff(const std::vector<float>& a, const float* b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

std::vector<Row> bench_layer(const Settings& s, const Layer& l) {
  const std::int64_t oh = l.h + 2 * l.pad - l.k + 1, ow = l.w + 2 * l.pad - l.k + 1;
  const std::int64_t n = l.batch, p = oh * ow, kk = l.c * l.k * l.k, np = n * p;
  const auto g =
      kernels::WindowGeometry::ordinary(Shape{l.h, l.w}, {{l.k, 1, l.pad, 1}, {l.k, 1, l.pad, 1}});
  const auto x = random_tensor(Shape{n, l.c, l.h, l.w}, 1);
  const auto w = random_tensor(Shape{l.o, l.c, l.k, l.k}, 2);
  const auto dy = random_tensor(Shape{n, l.o, oh, ow}, 3);
  Tensor<float> y(Shape{n, l.o, oh, ow}), dx(x.shape()), dw(w.shape());

  // The baseline's operands in GEMM layout, allocated once.
  std::vector<float> col(static_cast<std::size_t>(kk * np)),
      dyg(static_cast<std::size_t>(l.o * np));
  fill_random(col.data(), kk * np, 4);
  fill_random(dyg.data(), l.o * np, 5);
  std::vector<float> yg(dyg.size()), dcol(col.size()), dwg(static_cast<std::size_t>(l.o * kk));
  const int oi = static_cast<int>(l.o), ki = static_cast<int>(kk), npi = static_cast<int>(np);
  const float* wp = w.data();
  auto blas_forward = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, oi, npi, ki, 1.0f, wp, ki, col.data(),
                npi, 0.0f, yg.data(), npi);
  };
  auto blas_bwd_in = [&] {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ki, npi, oi, 1.0f, wp, ki, dyg.data(), npi,
                0.0f, dcol.data(), npi);
  };
  auto blas_bwd_w = [&] {
    // dW^T [K, O]: the orientation BLAS runs faster (and the one distop's kernel uses).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ki, oi, npi, 1.0f, col.data(), npi,
                dyg.data(), npi, 0.0f, dwg.data(), oi);
  };
  const Tensor<float> no_bias;
  auto conv_forward = [&] { kernels::conv_forward(x, w, no_bias, y, g); };
  auto conv_bwd_in = [&] { kernels::conv_backward_input(dy, w, 0.0f, dx, g); };
  auto conv_bwd_w = [&] { kernels::conv_backward_weight(dy, x, 0.0f, dw, g); };
  kernels::ConvColumns<float> kept;

  // The layer on the tape, with the same input and weights.
  ConvOptions opt;
  opt.padding = {l.pad};
  Conv<float> layer(2, l.c, l.o, {l.k}, with_seed(opt, 2024));
  layer.weight().value().local().copy_from(w);
  const Partition self = Partition::self();
  const TensorSpace xs(self,
                       distop::Decomposition::balanced(x.shape(), self.shape(), {0, -1, -1, -1}));
  DistTensor<float> x_value(xs);
  x_value.local().copy_from(x);
  Var<float> xv(x_value, true);
  const TensorSpace ys = layer.output_space(xs);
  DistTensor<float> dy_value(ys);
  dy_value.local().copy_from(dy);
  Tape tape;
  auto layer_step = [&] {
    Var<float> yv = layer.forward(tape, xv);
    yv.accumulate_grad(dy_value);
    tape.backward();
    layer.weight().zero_grad();
    layer.bias().zero_grad();
    xv.zero_grad();
  };

  // Check once that the kernels and the layer agree with each other.
  conv_bwd_w();
  const auto dw_ref = dw.to_vector();
  {
    Var<float> yv = layer.forward(tape, xv);
    yv.accumulate_grad(dy_value);
    tape.backward();
    const double err = max_rel_diff(dw_ref, layer.weight().grad().data());
    DISTOP_CHECK(err < 1e-4, "bench_conv", "the layer and the kernel disagree by ", err);
    layer.weight().zero_grad();
    layer.bias().zero_grad();
    xv.zero_grad();
  }

  const std::vector<Case> cases{
      {"forward", 1, {}, conv_forward, blas_forward},
      {"bwd_in", 1, {}, conv_bwd_in, blas_bwd_in},
      {"bwd_w", 1, {}, conv_bwd_w, blas_bwd_w},
      {"fwd+bwd",
       3,
       {},
       [&] {
         kernels::conv_forward(x, w, no_bias, y, g, &kept);
         conv_bwd_in();
         kernels::conv_backward_weight(dy, x, 0.0f, dw, g, &kept);
       },
       [&] {
         blas_forward();
         blas_bwd_in();
         blas_bwd_w();
       }},
      {"layer",
       3,
       {},
       layer_step,
       [&] {
         blas_forward();
         blas_bwd_in();
         blas_bwd_w();
       }},
  };
  std::vector<Row> rows;
  const double flops = 2.0 * static_cast<double>(l.o * kk * np);
  for (const auto& c : cases) {
    auto run_distop = [&c] {
      if (c.setup) c.setup();
      return bench::time_one(c.distop);
    };
    auto run_blas = [&c] { return bench::time_one(c.blas); };
    const auto m = bench::measure_pairs(
        [&](int reps) { return bench::interleave(reps, run_distop, run_blas); }, s.reps,
        s.budget_s);
    rows.push_back(Row{l.name, c.pass, flops, c.gemms, m.reps, m.median_a_us(), m.median_b_us()});
    print_row(s, l, rows.back());
  }
  return rows;
}

int run(const Settings& s) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    std::fprintf(stderr, "bench_conv times one process; run it with mpiexec -n 1\n");
    return 1;
  }
  if constexpr (!distop::kHostAccessible) {
    std::fprintf(stderr, "bench_conv compares against host cblas; tensors here live on a GPU\n");
    return 1;
  }
  kernels::set_conv_method(s.method == "im2col"   ? kernels::ConvMethod::im2col
                           : s.method == "bands"  ? kernels::ConvMethod::bands
                           : s.method == "direct" ? kernels::ConvMethod::direct
                                                  : kernels::ConvMethod::automatic);
  const std::vector<Layer> layers{{"conv1", 64, 1, 6, 28, 28, 5, 2},
                                  {"conv2", 64, 6, 16, 14, 14, 5, 0},
                                  {"resnet", s.large_batch, 64, 64, 56, 56, 3, 1}};
  if (s.csv) {
    std::printf("layer,pass,batch,c,o,h,w,k,distop_us,blas_us,ratio\n");
  } else {
#ifdef DISTOP_HAVE_OPENBLAS
    std::printf("# bench_conv: 2-D convolution<float>, 1 process, OpenBLAS %s, %d thread(s)\n",
                openblas_get_corename(), openblas_get_num_threads());
#else
    std::printf("# bench_conv: 2-D convolution<float>, 1 process\n");
#endif
    std::printf(
        "# baseline: cblas_sgemm of the im2col GEMMs over the whole batch on operands already in "
        "GEMM layout\n# (forward 1, bwd_in 1, bwd_w 1, fwd+bwd and layer 3); gemm m,n,k is the "
        "forward GEMM's\n");
    std::printf(
        "# GFLOP/s = 2 O K N P per GEMM / median time; ratio = distop / blas GFLOP/s; "
        "pass (fwd+bwd and layer rows): ratio >= %.2f\n",
        kTargetRatio);
    table().header();
  }
  int rows = 0, passed = 0;
  for (const auto& l : layers) {
    if (!s.only.empty() && l.name != s.only) continue;
    for (const auto& r : bench_layer(s, l)) {
      if (!r.targeted()) continue;
      ++rows;
      if (r.pass_target()) ++passed;
    }
  }
  if (!s.csv) std::printf("# %d of %d forward+backward rows pass\n", passed, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);

  Settings s;
  CLI::App app{"Times distop's local convolution against cblas_sgemm of the im2col GEMMs"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/false);
  app.add_option("--large-batch", s.large_batch, "batch of the 64 -> 64 3x3 layer on 56x56")
      ->check(CLI::Range(1, 256));
  app.add_option("--only", s.only, "time one layer: conv1, conv2 or resnet");
  app.add_flag("--csv", s.csv, "print layer,pass,batch,c,o,h,w,k,distop_us,blas_us,ratio rows");
  app.add_option("--method", s.method, "how the host kernels compute (kernels::ConvMethod)")
      ->check(CLI::IsMember({"automatic", "im2col", "bands", "direct"}))
      ->capture_default_str();
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;

  return bench::run_or_abort([&] { return run(s); });
}
