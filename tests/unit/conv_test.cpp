#include "distop/kernels/conv.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "distop/kernels/window.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/conv.hpp"
#include "gradcheck.hpp"
#include "simd_cap.hpp"

namespace {

// The options with the layer's seed set (the seed is one of the options).
distop::nn::ConvOptions with_seed(distop::nn::ConvOptions o, std::uint64_t seed) {
  o.seed = seed;
  return o;
}

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
using distop::kernels::WindowGeometry;
using distop::nn::Conv;
using distop::nn::ConvOptions;
namespace kernels = distop::kernels;
namespace test = distop::test;
using I = std::vector<std::int64_t>;

// A convolution's extents: geometry, batch N, channels C, outputs O.
struct Case {
  std::string name;
  WindowGeometry g;
  std::int64_t n, c, o;
};

// A geometry with explicit offsets; out defaults to what the offsets and extents allow.
WindowGeometry geometry(I in, I k, I s, I d, I off, I out = {}) {
  WindowGeometry g;
  g.kernel = k;
  g.stride = s;
  g.dilation = d;
  g.offset = off;
  g.in = Shape(in);
  if (out.empty()) {
    for (std::size_t a = 0; a < in.size(); ++a)
      out.push_back((in[a] + 2 * off[a] - d[a] * (k[a] - 1) - 1) / s[a] + 1);
  }
  g.out = Shape(out);
  return g;
}

std::vector<Case> cases() {
  return {
      {"1d_pad", geometry({11}, {3}, {1}, {1}, {1}), 2, 3, 2},
      {"1d_stride2_even_dil2", geometry({13}, {4}, {2}, {2}, {3}), 2, 2, 3},
      {"1d_per_sample_gemm", geometry({1100}, {3}, {1}, {1}, {1}), 2, 2, 2},
      {"1d_ragged_chunks", geometry({402}, {3}, {1}, {1}, {0}), 4, 2, 3},
      {"2d_pad_stride_dil", geometry({7, 6}, {3, 2}, {2, 1}, {1, 2}, {1, 0}), 2, 2, 3},
      {"2d_negative_offset", geometry({9, 8}, {3, 3}, {1, 2}, {1, 1}, {-2, -1}, {3, 2}), 2, 2, 2},
      {"2d_large_offset", geometry({5, 6}, {2, 3}, {1, 1}, {1, 1}, {4, 5}, {6, 7}), 1, 3, 2},
      {"2d_even_kernel", geometry({6, 6}, {2, 4}, {2, 2}, {1, 1}, {1, 2}), 3, 2, 2},
      {"2d_pointwise", geometry({4, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}), 2, 3, 4},
      {"2d_pointwise_stride2", geometry({5, 5}, {1, 1}, {2, 2}, {1, 1}, {0, 0}), 2, 2, 3},
      {"3d", geometry({5, 4, 6}, {2, 3, 2}, {1, 2, 2}, {2, 1, 1}, {1, 1, 0}), 2, 2, 2},
      {"3d_cube_pad", geometry({4, 4, 4}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}), 1, 2, 3},
      // More band shapes: LeNet's conv2, chunks of 8 and 5 samples, a dilated height.
      {"2d_lenet_conv2", geometry({14, 14}, {5, 5}, {1, 1}, {1, 1}, {0, 0}), 2, 6, 4},
      {"2d_band_ragged_chunks", geometry({12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}), 13, 6, 3},
      {"2d_height_dilation", geometry({9, 7}, {3, 2}, {1, 2}, {2, 1}, {2, 0}), 2, 3, 2},
      // Direct kernel tiles: 11 outputs (full and partial channel blocks), a 7-wide kernel
      // (partial blocks of kernel columns), a dilated width.
      {"2d_many_outputs_wide_kernel", geometry({9, 12}, {2, 7}, {1, 1}, {1, 1}, {1, 3}), 2, 3, 11},
      {"2d_width_dilation", geometry({7, 11}, {2, 3}, {1, 1}, {1, 2}, {1, 2}), 2, 2, 5},
      // A depth of one input, one tap and one output whose tap reads the padding (the last rank of
      // a depth-split 1 x 3 x 3 layer with padding 1): the 2-D direct kernels do not apply.
      {"3d_flat_depth_in_padding",
       geometry({1, 5, 6}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {-1, 1, 1}, {1, 5, 6}), 2, 2, 3},
  };
}

// Every host method: the kernels must agree however they compute. A method that does not apply
// to a geometry falls back (direct needs 1-D or 2-D windows of stride 1 and a CPU with AVX2;
// bands stride 1 along the height); direct runs twice, with the CPU's widest vectors and capped
// at AVX2's (the same as the first on a CPU without AVX-512).
struct MethodRun {
  kernels::ConvMethod method;
  int vector_cap;  // set_host_simd_cap
  const char* name;
};
const std::vector<MethodRun> kMethods{{kernels::ConvMethod::automatic, 0, "automatic"},
                                      {kernels::ConvMethod::im2col, 0, "im2col"},
                                      {kernels::ConvMethod::bands, 0, "bands"},
                                      {kernels::ConvMethod::direct, 0, "direct"},
                                      {kernels::ConvMethod::direct, 32, "direct (AVX2)"}};

// Sets the process-wide method (and direct's vector cap) for a scope.
class MethodScope {
 public:
  explicit MethodScope(kernels::ConvMethod m, int vector_cap = 0)
      : saved_(kernels::conv_method()), cap_(vector_cap) {
    kernels::set_conv_method(m);
  }
  ~MethodScope() { kernels::set_conv_method(saved_); }
  MethodScope(const MethodScope&) = delete;
  MethodScope& operator=(const MethodScope&) = delete;

 private:
  kernels::ConvMethod saved_;
  distop::test::SimdCapScope cap_;
};

// Whether a case's geometry is one the direct kernels take (on a CPU that has them).
bool direct_applies(const WindowGeometry& g) {
  if (kernels::host_simd_bytes() == 0 || g.dims() > 2) return false;
  bool pointwise = true;
  for (int a = 0; a < g.dims(); ++a) {
    const auto u = static_cast<std::size_t>(a);
    if (g.stride[u] != 1 && g.out[a] != 1) return false;
    pointwise = pointwise && g.kernel[u] == 1 && g.offset[u] == 0 && g.in[a] == g.out[a];
  }
  return !pointwise;
}

// Runs f(method, case) for every ConvMethod, set for the call, and every case.
template <class F>
void for_each_method_and_case(const F& f) {
  for (const auto& run : kMethods) {
    SCOPED_TRACE(run.name);
    const MethodScope scope(run.method, run.vector_cap);
    for (const auto& cs : cases()) {
      SCOPED_TRACE(cs.name);
      f(run.method, cs);
    }
  }
}

Shape lead(std::int64_t a, std::int64_t b, const Shape& s) {
  I e{a, b};
  e.insert(e.end(), s.begin(), s.end());
  return Shape(e);
}

// A case's x [N, C, in...], w [O, C, k...] and y [N, O, out...] shapes.
struct Shapes {
  Shape x, w, y;
};
Shapes shapes_of(const Case& cs) {
  return {lead(cs.n, cs.c, cs.g.in), lead(cs.o, cs.c, Shape(cs.g.kernel)),
          lead(cs.n, cs.o, cs.g.out)};
}

std::vector<double> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = u(gen);
  return v;
}

Tensor<double> random_tensor(const Shape& s, unsigned seed) {
  return Tensor<double>::from_vector(s, random_values(s.numel(), seed));
}

// Calls f(n, o, c, out_flat, in_flat) for every (sample, output channel, input channel, output
// position, tap) whose input index lies inside the input: the direct loops of the definition.
template <class F>
void for_each_term(const Case& cs, F f) {
  const auto& g = cs.g;
  const int d = g.dims();
  const std::int64_t p_n = g.out.numel(), taps = g.kernel_numel();
  for (std::int64_t n = 0; n < cs.n; ++n)
    for (std::int64_t o = 0; o < cs.o; ++o)
      for (std::int64_t c = 0; c < cs.c; ++c)
        for (std::int64_t p = 0; p < p_n; ++p)
          for (std::int64_t j = 0; j < taps; ++j) {
            // Unflatten p and j (row-major) and find the input index.
            std::int64_t pr = p, jr = j, in_flat = 0, in_stride = 1;
            bool inside = true;
            std::vector<std::int64_t> idx(static_cast<std::size_t>(d));
            for (int a = d - 1; a >= 0; --a) {
              const auto u = static_cast<std::size_t>(a);
              const std::int64_t oa = pr % g.out[a], ja = jr % g.kernel[u];
              pr /= g.out[a];
              jr /= g.kernel[u];
              const std::int64_t i = oa * g.stride[u] - g.offset[u] + ja * g.dilation[u];
              inside = inside && i >= 0 && i < g.in[a];
              in_flat += i * in_stride;
              in_stride *= g.in[a];
            }
            if (inside) f(n, o, c, p, j, in_flat);
          }
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y = conv(x, w) + b, dx = conv^T_x(dy, w), dw = conv^T_w(dy, x), db by direct loops.
Reference reference(const Case& cs, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& dy) {
  const auto& g = cs.g;
  const std::int64_t p_n = g.out.numel(), q_n = g.in.numel(), taps = g.kernel_numel();
  Reference r;
  r.y.assign(static_cast<std::size_t>(cs.n * cs.o * p_n), 0.0);
  r.dx.assign(static_cast<std::size_t>(cs.n * cs.c * q_n), 0.0);
  r.dw.assign(static_cast<std::size_t>(cs.o * cs.c * taps), 0.0);
  r.db.assign(static_cast<std::size_t>(cs.o), 0.0);
  for (std::int64_t n = 0; n < cs.n; ++n)
    for (std::int64_t o = 0; o < cs.o; ++o)
      for (std::int64_t p = 0; p < p_n; ++p) {
        const auto yi = static_cast<std::size_t>((n * cs.o + o) * p_n + p);
        r.y[yi] = b[static_cast<std::size_t>(o)];
        r.db[static_cast<std::size_t>(o)] += dy[yi];
      }
  for_each_term(cs, [&](std::int64_t n, std::int64_t o, std::int64_t c, std::int64_t p,
                        std::int64_t j, std::int64_t i) {
    const auto yi = static_cast<std::size_t>((n * cs.o + o) * p_n + p);
    const auto xi = static_cast<std::size_t>((n * cs.c + c) * q_n + i);
    const auto wi = static_cast<std::size_t>((o * cs.c + c) * taps + j);
    r.y[yi] += w[wi] * x[xi];
    r.dx[xi] += w[wi] * dy[yi];
    r.dw[wi] += dy[yi] * x[xi];
  });
  return r;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i])))
        << what << " entry " << i;
}

double dot(const Tensor<double>& a, const Tensor<double>& b) {
  const auto av = a.to_vector(), bv = b.to_vector();
  double s = 0;
  for (std::size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

TEST(WindowGeometry, OrdinaryUsesPaddingAsOffsetAndTheOutputExtent) {
  const auto g = WindowGeometry::ordinary(
      Shape{28, 14}, {{5, 1, 2, 1}, {3, 2, 1, 2}});  // {kernel, stride, padding, dilation}
  EXPECT_EQ(g.dims(), 2);
  EXPECT_EQ(g.kernel, (I{5, 3}));
  EXPECT_EQ(g.stride, (I{1, 2}));
  EXPECT_EQ(g.dilation, (I{1, 2}));
  EXPECT_EQ(g.offset, (I{2, 1}));
  EXPECT_EQ(g.in, (Shape{28, 14}));
  EXPECT_EQ(g.out, (Shape{28, 6}));
  EXPECT_EQ(g.kernel_numel(), 15);
  EXPECT_NE(g.str().find("offset"), std::string::npos);
  EXPECT_NO_THROW(g.validate("test"));
}

TEST(WindowGeometry, RejectsInvalidGeometries) {
  EXPECT_THROW(WindowGeometry::ordinary(Shape{}, {}), distop::Error);
  EXPECT_THROW(WindowGeometry::ordinary(Shape{4, 4}, {{3, 1, 0, 1}}), distop::Error);
  EXPECT_THROW(WindowGeometry::ordinary(Shape{2, 2, 2, 2}, std::vector<distop::ConvWindow>(4)),
               distop::Error);
  EXPECT_THROW(WindowGeometry::ordinary(Shape{4}, {{5, 1, 0, 1}}), distop::Error);  // too large
  EXPECT_THROW(WindowGeometry::ordinary(Shape{4}, {{3, 0, 0, 1}}), distop::Error);  // stride 0
  EXPECT_THROW(WindowGeometry::ordinary(Shape{4}, {{3, 1, -1, 1}}), distop::Error);
  auto g = geometry({5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1});
  EXPECT_NO_THROW(g.validate("test"));
  auto bad = g;
  bad.stride = {1};
  EXPECT_THROW(bad.validate("test"), distop::Error);
  bad = g;
  bad.dilation = {1, 0};
  EXPECT_THROW(bad.validate("test"), distop::Error);
  bad = g;
  bad.out = Shape{5, 0};
  EXPECT_THROW(bad.validate("test"), distop::Error);
  bad = g;
  bad.in = Shape{5};
  EXPECT_THROW(bad.validate("test"), distop::Error);
  bad = geometry({2, 2, 2, 2}, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, {0, 0, 0, 0});
  EXPECT_THROW(bad.validate("test"), distop::Error);
}

// Forward, both backward passes and the bias gradient against the direct loops, with beta 0
// (the output holds NaN first: it must not be read) and beta 0.5.
TEST(ConvKernels, MatchDirectLoops) {
  unsigned seed = 1;
  for_each_method_and_case([&](kernels::ConvMethod, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    const auto x = random_tensor(xs, seed++), w = random_tensor(ws, seed++),
               b = random_tensor(Shape{cs.o}, seed++), dy = random_tensor(ys, seed++);
    const auto ref = reference(cs, x.to_vector(), w.to_vector(), b.to_vector(), dy.to_vector());

    Tensor<double> y(ys);
    y.fill(std::numeric_limits<double>::quiet_NaN());
    kernels::conv_forward(x, w, b, y, cs.g);
    expect_close(y.to_vector(), ref.y, "y");

    Tensor<double> y0(ys);
    kernels::conv_forward(x, w, Tensor<double>(), y0, cs.g);
    auto ref_nobias = ref.y;
    for (std::size_t i = 0; i < ref_nobias.size(); ++i)
      ref_nobias[i] -= b.to_vector()[(i / static_cast<std::size_t>(cs.g.out.numel())) %
                                     static_cast<std::size_t>(cs.o)];
    expect_close(y0.to_vector(), ref_nobias, "y without bias");

    for (double beta : {0.0, 0.5}) {
      SCOPED_TRACE(beta);
      auto prior = [&](const Shape& s, unsigned sd) {
        if (beta == 0.0) {
          Tensor<double> t(s);
          t.fill(std::numeric_limits<double>::quiet_NaN());
          return t;
        }
        return random_tensor(s, sd);
      };
      auto with_prior = [&](const Tensor<double>& p, const std::vector<double>& r) {
        auto v = r;
        if (beta != 0.0) {
          const auto pv = p.to_vector();
          for (std::size_t i = 0; i < v.size(); ++i) v[i] += beta * pv[i];
        }
        return v;
      };
      auto dx = prior(xs, seed++);
      const auto dx_want = with_prior(dx, ref.dx);
      kernels::conv_backward_input(dy, w, beta, dx, cs.g);
      expect_close(dx.to_vector(), dx_want, "dx");

      auto dw = prior(ws, seed++);
      const auto dw_want = with_prior(dw, ref.dw);
      kernels::conv_backward_weight(dy, x, beta, dw, cs.g);
      expect_close(dw.to_vector(), dw_want, "dw");

      auto db = prior(Shape{cs.o}, seed++);
      const auto db_want = with_prior(db, ref.db);
      kernels::conv_backward_bias(dy, beta, db);
      expect_close(db.to_vector(), db_want, "db");
    }
  });
}

// conv_backward (all the gradients from one call, the direct kernels sharing the padded dy) gives
// what the three separate passes give, with fresh (beta 0) and accumulated (beta 0.5) targets and
// with some targets left out.
TEST(ConvKernels, OneBackwardCallMatchesTheSeparatePasses) {
  unsigned seed = 500;
  for_each_method_and_case([&](kernels::ConvMethod, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    const auto x = random_tensor(xs, seed++), w = random_tensor(ws, seed++),
               dy = random_tensor(ys, seed++);
    for (double beta : {0.0, 0.5}) {
      for (int which = 1; which < 8; ++which) {  // bits: dx, dw, db
        SCOPED_TRACE(::testing::Message() << "beta " << beta << ", targets " << which);
        const bool want_x = which & 1, want_w = which & 2, want_b = which & 4;
        auto dx = random_tensor(xs, 1), dw = random_tensor(ws, 2),
             db = random_tensor(Shape{cs.o}, 3);
        auto rx = dx.clone(), rw = dw.clone(), rb = db.clone();
        kernels::ConvGradients<double> grads;
        if (want_x) {
          grads.dx = &dx;
          grads.beta_x = beta;
        }
        if (want_w) {
          grads.dw = &dw;
          grads.beta_w = beta;
        }
        if (want_b) {
          grads.db = &db;
          grads.beta_b = beta;
        }
        kernels::conv_backward(dy, x, w, cs.g, grads);
        if (want_x) kernels::conv_backward_input(dy, w, beta, rx, cs.g);
        if (want_w) kernels::conv_backward_weight(dy, x, beta, rw, cs.g);
        if (want_b) kernels::conv_backward_bias(dy, beta, rb);
        expect_close(dx.to_vector(), rx.to_vector(), "dx");
        expect_close(dw.to_vector(), rw.to_vector(), "dw");
        expect_close(db.to_vector(), rb.to_vector(), "db");
      }
    }
  });
}

// The float kernels (what training runs; their vector forms differ from double's: twice the lanes,
// other masks) against the direct loops in double, for every method and case: the forward pass
// with and without bias, the three backward passes, and the one backward call with all targets.
// Inputs lie in [-1, 1], so an entry's float rounding error stays far below 1e-6 times the number
// of terms it sums.
TEST(ConvKernels, FloatMatchesTheDoubleLoops) {
  unsigned seed = 700;
  auto expect_near = [](const Tensor<float>& got, const std::vector<double>& want, double terms,
                        const char* what) {
    const auto g = got.to_vector();
    ASSERT_EQ(g.size(), want.size()) << what;
    for (std::size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], want[i], 1e-6 * std::max(1.0, terms)) << what << " entry " << i;
  };
  auto to_float = [](const std::vector<double>& v, const Shape& s) {
    return Tensor<float>::from_vector(s, std::vector<float>(v.begin(), v.end()));
  };
  for_each_method_and_case([&](kernels::ConvMethod, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    // Round the inputs to float first, so that the reference sees what the kernels see.
    auto rounded = [&](std::int64_t n) {
      auto v = random_values(n, seed++);
      for (auto& e : v) e = static_cast<double>(static_cast<float>(e));
      return v;
    };
    const auto xd = rounded(xs.numel()), wd = rounded(ws.numel()), bd = rounded(cs.o),
               dyd = rounded(ys.numel());
    const auto ref = reference(cs, xd, wd, bd, dyd);
    const auto x = to_float(xd, xs), w = to_float(wd, ws), b = to_float(bd, Shape{cs.o}),
               dy = to_float(dyd, ys);
    // Terms per entry: the channel-times-tap sums of y and dx, the sample-times-position sums of
    // dw and db.
    const auto taps = static_cast<double>(cs.c * cs.g.kernel_numel());
    const auto positions = static_cast<double>(cs.n * cs.g.out.numel());

    Tensor<float> y(ys);
    y.fill(std::numeric_limits<float>::quiet_NaN());
    kernels::conv_forward(x, w, b, y, cs.g);
    expect_near(y, ref.y, taps, "y");
    Tensor<float> y0(ys);
    kernels::conv_forward(x, w, Tensor<float>(), y0, cs.g);
    auto ref_nobias = ref.y;
    for (std::size_t i = 0; i < ref_nobias.size(); ++i)
      ref_nobias[i] -=
          bd[(i / static_cast<std::size_t>(cs.g.out.numel())) % static_cast<std::size_t>(cs.o)];
    expect_near(y0, ref_nobias, taps, "y without bias");

    Tensor<float> dx(xs), dw(ws), db(Shape{cs.o});
    dx.fill(std::numeric_limits<float>::quiet_NaN());
    dw.fill(std::numeric_limits<float>::quiet_NaN());
    db.fill(std::numeric_limits<float>::quiet_NaN());
    kernels::conv_backward_input(dy, w, 0.0f, dx, cs.g);
    kernels::conv_backward_weight(dy, x, 0.0f, dw, cs.g);
    kernels::conv_backward_bias(dy, 0.0f, db);
    expect_near(dx, ref.dx, taps, "dx");
    expect_near(dw, ref.dw, positions, "dw");
    expect_near(db, ref.db, positions, "db");

    dx.fill(std::numeric_limits<float>::quiet_NaN());
    dw.fill(std::numeric_limits<float>::quiet_NaN());
    db.fill(std::numeric_limits<float>::quiet_NaN());
    kernels::ConvGradients<float> grads;
    grads.dx = &dx;
    grads.dw = &dw;
    grads.db = &db;
    kernels::conv_backward(dy, x, w, cs.g, grads);
    expect_near(dx, ref.dx, taps, "dx (one call)");
    expect_near(dw, ref.dw, positions, "dw (one call)");
    expect_near(db, ref.db, positions, "db (one call)");
  });
}

// <conv_x(x), dy> = <x, conv^T_x(dy)> and <conv_w(w), dy> = <w, conv^T_w(dy)>.
TEST(ConvKernels, BackwardPassesAreAdjoints) {
  unsigned seed = 100;
  for_each_method_and_case([&](kernels::ConvMethod, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    const auto x = random_tensor(xs, seed++), w = random_tensor(ws, seed++),
               dy = random_tensor(ys, seed++);
    Tensor<double> y(ys), dx(xs), dw(ws);
    kernels::conv_forward(x, w, Tensor<double>(), y, cs.g);
    kernels::conv_backward_input(dy, w, 0.0, dx, cs.g);
    kernels::conv_backward_weight(dy, x, 0.0, dw, cs.g);
    const double lhs = dot(y, dy);
    EXPECT_NEAR(lhs, dot(x, dx), 1e-12 * std::max(1.0, std::abs(lhs)));
    EXPECT_NEAR(lhs, dot(w, dw), 1e-12 * std::max(1.0, std::abs(lhs)));
  });
}

// The weight gradient from the forward pass's kept im2col matrices equals the one that rebuilds
// them, to the bit; kept matrices of another batch size are ignored.
TEST(ConvKernels, KeptColumnsGiveTheSameWeightGradient) {
  unsigned seed = 300;
  for_each_method_and_case([&](kernels::ConvMethod method, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    const auto x = random_tensor(xs, seed++), w = random_tensor(ws, seed++),
               dy = random_tensor(ys, seed++);
    Tensor<double> y(ys), y_kept(ys), dw(ws), dw_kept(ws);
    kernels::ConvColumns<double> kept;
    kernels::conv_forward(x, w, Tensor<double>(), y, cs.g);
    kernels::conv_forward(x, w, Tensor<double>(), y_kept, cs.g, &kept);
    EXPECT_EQ(y.to_vector(), y_kept.to_vector());
    kernels::conv_backward_weight(dy, x, 0.0, dw, cs.g);
    kernels::conv_backward_weight(dy, x, 0.0, dw_kept, cs.g, &kept);
    EXPECT_EQ(dw.to_vector(), dw_kept.to_vector());
    // A 1x1 stride-1 window needs no im2col and keeps nothing; every other case here keeps.
    bool pointwise = true;
    for (int a = 0; a < cs.g.dims(); ++a)
      pointwise = pointwise && cs.g.kernel[static_cast<std::size_t>(a)] == 1 &&
                  cs.g.stride[static_cast<std::size_t>(a)] == 1 &&
                  cs.g.offset[static_cast<std::size_t>(a)] == 0 && cs.g.in[a] == cs.g.out[a];
    // The direct kernels keep their padded input frames instead.
    const bool direct = direct_applies(cs.g) && (method == kernels::ConvMethod::direct ||
                                                 method == kernels::ConvMethod::automatic);
    EXPECT_EQ(kept.empty(), pointwise);
    EXPECT_EQ(kept.frames, direct && !pointwise);
    if (cs.name == "2d_lenet_conv2" && !direct) {  // a shape the bands (host only) take
      EXPECT_EQ(kept.bands,
                method != kernels::ConvMethod::im2col && kernels::host_kernels_enabled());
    }
  });
  // What one form kept, handed to another (band columns, im2col columns, direct frames), is
  // rebuilt, not misread: the same weight gradient as with nothing kept.
  const std::vector<kernels::ConvMethod> forms{
      kernels::ConvMethod::bands, kernels::ConvMethod::im2col, kernels::ConvMethod::direct};
  for (const auto keeper : forms) {
    for (const auto reader : forms) {
      if (keeper == reader) continue;
      SCOPED_TRACE(::testing::Message() << "kept by " << static_cast<int>(keeper) << ", read by "
                                        << static_cast<int>(reader));
      const auto all = cases();
      const auto& cs = all[12];
      ASSERT_EQ(cs.name, "2d_lenet_conv2");
      const auto [xs, ws, ys] = shapes_of(cs);
      const auto x = random_tensor(xs, 7), w = random_tensor(ws, 8), dy = random_tensor(ys, 9);
      Tensor<double> y(ys), dw(ws), dw_ref(ws);
      kernels::ConvColumns<double> kept;
      {
        const MethodScope scope(keeper);
        kernels::conv_forward(x, w, Tensor<double>(), y, cs.g, &kept);
      }
      ASSERT_FALSE(kept.empty());
      const MethodScope scope(reader);
      kernels::conv_backward_weight(dy, x, 0.0, dw_ref, cs.g);
      kernels::conv_backward_weight(dy, x, 0.0, dw, cs.g, &kept);
      const auto a = dw.to_vector(), b = dw_ref.to_vector();
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]);
    }
  }
  // Columns of a one-sample batch do not fit a two-sample one: rebuilt, same result (bands and
  // direct frames alike).
  for (const auto method : {kernels::ConvMethod::bands, kernels::ConvMethod::direct}) {
    const MethodScope scope(method);
    const auto g = geometry({6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1});
    const auto x1 = random_tensor(Shape{1, 2, 6, 6}, 1), x2 = random_tensor(Shape{2, 2, 6, 6}, 2),
               w = random_tensor(Shape{3, 2, 3, 3}, 3), dy = random_tensor(Shape{2, 3, 6, 6}, 4);
    Tensor<double> y1(Shape{1, 3, 6, 6}), dw(Shape{3, 2, 3, 3}), dw_ref(Shape{3, 2, 3, 3});
    kernels::ConvColumns<double> other;
    kernels::conv_forward(x1, w, Tensor<double>(), y1, g, &other);
    ASSERT_FALSE(other.empty());
    kernels::conv_backward_weight(dy, x2, 0.0, dw_ref, g);
    kernels::conv_backward_weight(dy, x2, 0.0, dw, g, &other);
    EXPECT_EQ(dw.to_vector(), dw_ref.to_vector());
  }
}

// With the kept-columns limit at 0 a convolution keeps nothing for its weight gradient, which
// then rebuilds its matrices and gives the same result; the limit is restored after, and a
// negative one is an Error.
TEST(ConvKernels, KeptColumnsLimitZeroKeepsNothing) {
  EXPECT_EQ(kernels::conv_kept_columns_limit(), kernels::kMaxKeptColumnsBytes);
  EXPECT_THROW(kernels::set_conv_kept_columns_limit(-1), distop::Error);
  struct LimitScope {
    LimitScope() { kernels::set_conv_kept_columns_limit(0); }
    ~LimitScope() { kernels::set_conv_kept_columns_limit(kernels::kMaxKeptColumnsBytes); }
  };
  unsigned seed = 400;
  for_each_method_and_case([&](kernels::ConvMethod method, const Case& cs) {
    const auto [xs, ws, ys] = shapes_of(cs);
    const auto x = random_tensor(xs, seed++), w = random_tensor(ws, seed++),
               dy = random_tensor(ys, seed++);
    Tensor<double> y(ys), dw(ws), dw_ref(ws);
    kernels::conv_backward_weight(dy, x, 0.0, dw_ref, cs.g);
    const LimitScope limit;
    kernels::ConvColumns<double> kept;
    kernels::conv_forward(x, w, Tensor<double>(), y, cs.g, &kept);
    EXPECT_TRUE(kept.empty()) << cs.name << " with method " << static_cast<int>(method);
    kernels::conv_backward_weight(dy, x, 0.0, dw, cs.g, &kept);
    EXPECT_EQ(dw.to_vector(), dw_ref.to_vector()) << cs.name;
  });
  EXPECT_EQ(kernels::conv_kept_columns_limit(), kernels::kMaxKeptColumnsBytes);
}

TEST(ConvKernels, EmptyBatch) {
  const auto g = geometry({5}, {3}, {1}, {1}, {1});
  Tensor<double> x(Shape{0, 2, 5}), y(Shape{0, 3, 5}), dx(Shape{0, 2, 5});
  const auto w = random_tensor(Shape{3, 2, 3}, 1);
  EXPECT_NO_THROW(kernels::conv_forward(x, w, Tensor<double>(), y, g));
  EXPECT_NO_THROW(kernels::conv_backward_input(y, w, 0.0, dx, g));
  Tensor<double> dw(Shape{3, 2, 3}), db(Shape{3});
  dw.fill(std::numeric_limits<double>::quiet_NaN());
  db.fill(std::numeric_limits<double>::quiet_NaN());
  kernels::conv_backward_weight(y, x, 0.0, dw, g);
  kernels::conv_backward_bias(y, 0.0, db);
  for (double v : dw.to_vector()) EXPECT_EQ(v, 0.0);
  for (double v : db.to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(ConvKernels, BadShapesThrow) {
  const auto g = geometry({6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1});
  Tensor<double> x(Shape{2, 3, 6, 6}), w(Shape{4, 3, 3, 3}), b(Shape{4}), y(Shape{2, 4, 6, 6});
  EXPECT_NO_THROW(kernels::conv_forward(x, w, b, y, g));
  Tensor<double> x_rank(Shape{2, 3, 36}), x_sp(Shape{2, 3, 6, 5}), w_c(Shape{4, 2, 3, 3}),
      w_k(Shape{4, 3, 3, 2}), b_bad(Shape{3}), y_o(Shape{2, 5, 6, 6}), y_n(Shape{1, 4, 6, 6}),
      y_sp(Shape{2, 4, 5, 6});
  EXPECT_THROW(kernels::conv_forward(x_rank, w, b, y, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x_sp, w, b, y, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w_c, b, y, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w_k, b, y, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w, b_bad, y, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w, b, y_o, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w, b, y_n, g), distop::Error);
  EXPECT_THROW(kernels::conv_forward(x, w, b, y_sp, g), distop::Error);
  auto bad_g = g;
  bad_g.stride = {1, 0};
  EXPECT_THROW(kernels::conv_forward(x, w, b, y, bad_g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_input(y, w, 0.0, x_sp, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_input(y_sp, w, 0.0, x, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_input(y, w_c, 0.0, x, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_weight(y, x, 0.0, w_k, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_weight(y_n, x, 0.0, w, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_weight(y, x_sp, 0.0, w, g), distop::Error);
  EXPECT_THROW(kernels::conv_backward_bias(y, 0.0, b_bad), distop::Error);
  EXPECT_THROW(kernels::conv_backward_bias(b, 0.0, b), distop::Error);
  // conv_backward checks every target, whichever form (the direct one-pass form included) would
  // compute them.
  for (const auto& run : kMethods) {
    SCOPED_TRACE(run.name);
    const MethodScope scope(run.method, run.vector_cap);
    Tensor<double> dx(x.shape()), dw(w.shape()), db(b.shape());
    auto all = [&](Tensor<double>* gx, Tensor<double>* gw, Tensor<double>* gb) {
      kernels::ConvGradients<double> grads;
      grads.dx = gx;
      grads.dw = gw;
      grads.db = gb;
      kernels::conv_backward(y, x, w, g, grads);
    };
    EXPECT_NO_THROW(all(&dx, &dw, &db));
    EXPECT_THROW(all(&x_sp, &dw, &db), distop::Error);
    EXPECT_THROW(all(&dx, &w_k, &db), distop::Error);
    EXPECT_THROW(all(&dx, &dw, &b_bad), distop::Error);
    EXPECT_THROW(all(nullptr, &w_k, &db), distop::Error);
    EXPECT_THROW(all(nullptr, &dw, &b_bad), distop::Error);
  }
}

// ---------------------------------------------------------------------------------------------
// The tape functional and the layer.

// [N, C, s...] on this process, split (trivially) along the batch axis only.
TensorSpace local_space(const Shape& s) {
  auto p = distop::Partition::self();
  std::vector<int> axes{0};
  axes.resize(static_cast<std::size_t>(s.rank()), -1);
  return TensorSpace(p, distop::Decomposition::balanced(s, p.shape(), axes));
}

TEST(ConvWindows, BroadcastsOptionsAndRejectsBadCounts) {
  ConvOptions opt;
  opt.stride = {2, 1};
  opt.padding = {1};
  const auto w = distop::nn::conv_windows(2, {5}, opt);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].kernel, 5);
  EXPECT_EQ(w[1].kernel, 5);
  EXPECT_EQ(w[0].stride, 2);
  EXPECT_EQ(w[1].stride, 1);
  EXPECT_EQ(w[1].padding, 1);
  EXPECT_EQ(w[1].dilation, 1);
  EXPECT_THROW(distop::nn::conv_windows(2, {3, 3, 3}, ConvOptions{}), distop::Error);
  EXPECT_THROW(distop::nn::conv_windows(3, {3}, opt), distop::Error);  // 2 strides for 3 axes
  EXPECT_THROW(distop::nn::conv_windows(0, {3}, ConvOptions{}), distop::Error);
  EXPECT_THROW(distop::nn::conv_windows(4, {3}, ConvOptions{}), distop::Error);
  EXPECT_THROW(distop::nn::conv_windows(1, {0}, ConvOptions{}), distop::Error);
  ConvOptions neg;
  neg.padding = {-1};
  EXPECT_THROW(distop::nn::conv_windows(1, {3}, neg), distop::Error);
  ConvOptions zero_dil;
  zero_dil.dilation = {0};
  EXPECT_THROW(distop::nn::conv_windows(1, {3}, zero_dil), distop::Error);
}

TEST(Conv, InitialisesLikePyTorchAndDeterministically) {
  Conv<double> a(2, 3, 4, {3, 2}, {.seed = 42}), b(2, 3, 4, {3, 2}, {.seed = 42}),
      c(2, 3, 4, {3, 2}, {.seed = 43});
  EXPECT_EQ(a.dims(), 2);
  EXPECT_EQ(a.in_channels(), 3);
  EXPECT_EQ(a.out_channels(), 4);
  EXPECT_EQ(a.weight().space().global_shape(), (Shape{4, 3, 3, 2}));
  EXPECT_EQ(a.bias().space().global_shape(), (Shape{4}));
  ASSERT_EQ(a.parameters().size(), 2u);
  EXPECT_TRUE(a.parameters()[0].same_as(a.weight()));
  const double bound = 1 / std::sqrt(3.0 * 3 * 2);
  const auto w = a.weight().value().local().to_vector();
  const auto bias = a.bias().value().local().to_vector();
  double wmax = 0;
  for (double v : w) wmax = std::max(wmax, std::abs(v));
  for (double v : bias) EXPECT_LE(std::abs(v), bound);
  EXPECT_LE(wmax, bound);
  EXPECT_GT(wmax, 0.5 * bound);  // the bound is the fan-in's, not a smaller one
  EXPECT_NE(w[0], bias[0]);
  EXPECT_EQ(w, b.weight().value().local().to_vector());
  EXPECT_NE(w, c.weight().value().local().to_vector());
  ConvOptions nb;
  nb.bias = false;
  Conv<double> d(1, 2, 2, {3}, with_seed(nb, 1));
  EXPECT_FALSE(d.has_bias());
  EXPECT_EQ(d.parameters().size(), 1u);
  EXPECT_THROW(d.bias(), distop::Error);
  EXPECT_THROW(Conv<double>(2, 0, 2, {3}, {.seed = 1}), distop::Error);
  EXPECT_THROW(Conv<double>(2, 2, 2, {3, 3, 3}, {.seed = 1}), distop::Error);
}

TEST(Conv, OutputSpace) {
  ConvOptions opt;
  opt.stride = {2};
  opt.padding = {1};
  Conv<double> layer(2, 3, 5, {3}, with_seed(opt, 1));
  const auto ys = layer.output_space(local_space(Shape{4, 3, 9, 8}));
  EXPECT_EQ(ys.global_shape(), (Shape{4, 5, 5, 4}));
  EXPECT_THROW(layer.output_space(local_space(Shape{4, 2, 9, 8})), distop::Error);  // channels
  EXPECT_THROW(layer.output_space(local_space(Shape{4, 3, 9})), distop::Error);     // rank
  Conv<double> unpadded(2, 3, 5, {3}, {.seed = 1});
  EXPECT_EQ(unpadded.output_space(local_space(Shape{4, 3, 3, 8})).global_shape(),
            (Shape{4, 5, 1, 6}));
  EXPECT_THROW(unpadded.output_space(local_space(Shape{4, 3, 2, 8})), distop::Error);  // small
}

// A layer's gradients w.r.t. input, weight and bias against finite differences.
void check_layer(int dims, std::int64_t c, std::int64_t o, I kernel, const ConvOptions& opt,
                 const Shape& in, unsigned seed) {
  Conv<double> layer(dims, c, o, kernel, with_seed(opt, seed));
  Var<double> x(test::random_tensor<double>(local_space(in), seed + 1), true);
  const auto r = test::random_tensor<double>(layer.output_space(x.space()), seed + 2);
  std::vector<Var<double>> wrt{x};
  for (const auto& v : layer.parameters()) wrt.push_back(v);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, layer.forward(tape, x), r); }, wrt);
}

TEST(Conv, GradientsMatchFiniteDifferences1d) {
  ConvOptions opt;
  opt.stride = {2};
  opt.padding = {2};
  opt.dilation = {2};
  check_layer(1, 2, 3, {4}, opt, Shape{2, 2, 9}, 10);
  check_layer(1, 1, 2, {3}, ConvOptions{}, Shape{3, 1, 6}, 11);
}

TEST(Conv, GradientsMatchFiniteDifferences2d) {
  ConvOptions opt;
  opt.stride = {2, 1};
  opt.padding = {1, 0};
  opt.dilation = {1, 2};
  check_layer(2, 2, 3, {2, 3}, opt, Shape{2, 2, 5, 6}, 20);
  ConvOptions pad;
  pad.padding = {1};
  pad.bias = false;
  check_layer(2, 2, 2, {3}, pad, Shape{1, 2, 4, 4}, 21);
  check_layer(2, 3, 2, {1}, ConvOptions{}, Shape{2, 3, 3, 2}, 22);  // pointwise
}

// The float layer against the double one with the same weights (1-D to 3-D, with padding, stride
// and dilation): output, and the gradients of the input, the weight and the bias.
TEST(Conv, FloatLayerMatchesDouble) {
  ConvOptions strided;
  strided.stride = {2};
  strided.padding = {1};
  strided.dilation = {2};
  ConvOptions same;
  same.padding = {1};
  struct LayerCase {
    int dims;
    std::int64_t c, o;
    std::vector<std::int64_t> kernel;
    ConvOptions options;
    Shape input;
  };
  for (const auto& lc : {LayerCase{1, 3, 4, {4}, strided, Shape{2, 3, 17}},
                         LayerCase{2, 1, 6, {5}, ConvOptions{}, Shape{2, 1, 12, 12}},
                         LayerCase{2, 6, 5, {3}, same, Shape{2, 6, 9, 9}},
                         LayerCase{3, 2, 3, {2, 3, 2}, strided, Shape{1, 2, 6, 7, 5}}}) {
    SCOPED_TRACE(lc.input.str());
    Conv<float> cf(lc.dims, lc.c, lc.o, lc.kernel, with_seed(lc.options, 31));
    Conv<double> cd(lc.dims, lc.c, lc.o, lc.kernel, with_seed(lc.options, 31));
    cd.weight().value().local().copy_from(test::widened(cf.weight().value()).local());
    cd.bias().value().local().copy_from(test::widened(cf.bias().value()).local());
    test::expect_float_matches_double(
        local_space(lc.input), [&](Tape& t, const Var<double>& x) { return cd.forward(t, x); },
        [&](Tape& t, const Var<float>& x) { return cf.forward(t, x); }, 1e-5);
    test::expect_near_all(cf.weight().grad().local().to_vector(),
                          cd.weight().grad().local().to_vector(), 1e-5, "weight gradient");
    test::expect_near_all(cf.bias().grad().local().to_vector(),
                          cd.bias().grad().local().to_vector(), 1e-5, "bias gradient");
  }
}

TEST(Conv, GradientsMatchFiniteDifferences3d) {
  ConvOptions opt;
  opt.stride = {1, 2, 1};
  opt.padding = {1, 0, 1};
  opt.dilation = {1, 1, 2};
  check_layer(3, 2, 2, {2, 3, 2}, opt, Shape{1, 2, 3, 5, 4}, 30);
}

// The functional with a geometry a distributed layer would use: offsets that trim (negative) and
// that exceed any padding.
TEST(Conv, FunctionalGradientsWithExplicitOffsets) {
  for (const auto& g : {geometry({7, 6}, {3, 2}, {2, 1}, {1, 2}, {-1, 3}, {2, 6}),
                        geometry({8}, {4}, {1}, {2}, {-2}, {3})}) {
    SCOPED_TRACE(g.str());
    const std::int64_t n = 2, c = 2, o = 2;
    Var<double> x(test::random_tensor<double>(local_space(lead(n, c, g.in)), 1), true);
    Var<double> w(test::random_tensor<double>(local_space(lead(o, c, Shape(g.kernel))), 2), true);
    Var<double> b(test::random_tensor<double>(local_space(Shape{o}), 3), true);
    const auto ys = local_space(lead(n, o, g.out));
    const auto r = test::random_tensor<double>(ys, 4);
    test::expect_gradients_match(
        [&](Tape& tape) {
          return test::weighted_sum(tape, distop::nn::conv(tape, x, w, b, g, ys), r);
        },
        {x, w, b});
    // Without a bias (an undefined Var).
    test::expect_gradients_match(
        [&](Tape& tape) {
          return test::weighted_sum(tape, distop::nn::conv(tape, x, w, Var<double>(), g, ys), r);
        },
        {x, w});
  }
}

TEST(Conv, LayerAppliedTwiceAccumulatesItsGradients) {
  ConvOptions opt;
  opt.padding = {1};
  Conv<double> layer(2, 2, 2, {3}, with_seed(opt, 7));
  Var<double> x(test::random_tensor<double>(local_space(Shape{1, 2, 4, 3}), 8), true);
  const auto r = test::random_tensor<double>(x.space(), 9);
  std::vector<Var<double>> wrt{x, layer.weight(), layer.bias()};
  test::expect_gradients_match(
      [&](Tape& tape) {
        auto h = distop::nn::tanh(tape, layer.forward(tape, x));
        return test::weighted_sum(tape, layer.forward(tape, h), r);
      },
      wrt);
}

TEST(Conv, FunctionalRejectsAWrongOutputSpace) {
  const auto g = geometry({5}, {3}, {1}, {1}, {1});
  Var<double> x(test::random_tensor<double>(local_space(Shape{2, 2, 5}), 1));
  Var<double> w(test::random_tensor<double>(local_space(Shape{3, 2, 3}), 2));
  Tape tape;
  EXPECT_NO_THROW(distop::nn::conv(tape, x, w, Var<double>(), g, local_space(Shape{2, 3, 5})));
  EXPECT_THROW(distop::nn::conv(tape, x, w, Var<double>(), g, local_space(Shape{2, 3, 4})),
               distop::Error);
  EXPECT_THROW(distop::nn::conv(tape, x, w, Var<double>(), g, local_space(Shape{2, 2, 5})),
               distop::Error);
  Var<double> w_bad(test::random_tensor<double>(local_space(Shape{3, 1, 3}), 2));
  EXPECT_THROW(distop::nn::conv(tape, x, w_bad, Var<double>(), g, local_space(Shape{2, 3, 5})),
               distop::Error);
}

}  // namespace
