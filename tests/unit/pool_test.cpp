// Pooling: the kernels against naive loops, the layers' gradients against finite differences (1-D
// to 3-D, strides, even kernels, dilation, padding, overlapping windows), ties, and bad input.
#include "distop/nn/pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "distop/kernels/pool.hpp"
#include "gradcheck.hpp"
#include "simd_cap.hpp"

namespace {

using distop::ConvWindow;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
using distop::kernels::WindowGeometry;
using distop::nn::PoolKind;
using distop::nn::PoolOptions;
namespace test = distop::test;

// A whole tensor on this process.
TensorSpace space_of(const Shape& s) {
  return TensorSpace(s, Partition::self(Shape(std::vector<std::int64_t>(s.extents().size(), 1))));
}

// Distinct values 1/n apart in a scrambled order (7919 is prime and n not a multiple of it), so
// that no max-pooling window has a tie and finite differences never change a window's argmax.
Var<double> distinct_input(const Shape& s) {
  const std::int64_t n = s.numel();
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        static_cast<double>((i * 7919) % n) / static_cast<double>(n) - 0.5;
  DistTensor<double> x(space_of(s));
  x.local().copy_from(Tensor<double>::from_vector(s, v));
  return Var<double>(x, true);
}

// The naive pooling: every output, every tap, by multi-index odometers.
std::vector<double> reference(PoolKind kind, const std::vector<double>& x, const Shape& in_shape,
                              const WindowGeometry& g) {
  const int d = g.dims();
  const std::int64_t planes = in_shape[0] * in_shape[1];
  std::vector<double> y;
  for (std::int64_t p = 0; p < planes; ++p) {
    std::vector<std::int64_t> o(static_cast<std::size_t>(d), 0);
    for (std::int64_t t = 0; t < g.out.numel(); ++t) {
      double best = -std::numeric_limits<double>::infinity(), sum = 0;
      std::vector<std::int64_t> j(static_cast<std::size_t>(d), 0);
      for (std::int64_t u = 0; u < g.kernel_numel(); ++u) {
        bool inside = true;
        std::int64_t flat = 0;
        for (int a = 0; a < d; ++a) {
          const auto k = static_cast<std::size_t>(a);
          const std::int64_t i = o[k] * g.stride[k] - g.offset[k] + j[k] * g.dilation[k];
          inside = inside && i >= 0 && i < g.in[a];
          flat = flat * g.in[a] + i;
        }
        if (inside) {
          const double v = x[static_cast<std::size_t>(p * g.in.numel() + flat)];
          best = std::max(best, v);
          sum += v;
        }
        for (int a = d - 1; a >= 0; --a) {  // next tap
          const auto k = static_cast<std::size_t>(a);
          if (++j[k] < g.kernel[k]) break;
          j[k] = 0;
        }
      }
      y.push_back(kind == PoolKind::max ? best : sum / static_cast<double>(g.kernel_numel()));
      for (int a = d - 1; a >= 0; --a) {  // next output
        const auto k = static_cast<std::size_t>(a);
        if (++o[k] < g.out[a]) break;
        o[k] = 0;
      }
    }
  }
  return y;
}

struct Case {
  int dims;
  Shape input;
  std::vector<std::int64_t> kernel;
  PoolOptions options;
};

std::vector<Case> cases() {
  return {
      {1, Shape{2, 3, 9}, {3}, {.stride = 2, .padding = 1}},  // stride 2, padding
      {1, Shape{2, 2, 8}, {4}, {.stride = 1, .padding = 2}},  // even kernel, overlapping
      {1, Shape{1, 2, 10}, {2}, {}},                          // stride = kernel (the default)
      {2,
       Shape{2, 2, 7, 6},
       {3, 2},
       {.stride = {2, 1}, .padding = {1, 1}, .dilation = {2, 1}}},  // dilation 2, even kernel
      {2, Shape{1, 3, 8, 8}, {2}, {}},                              // the classic 2x2 pooling
      {2, Shape{1, 2, 6, 10}, {3}, {}},             // 3x3 tiling, a column left over
      {2, Shape{1, 2, 9, 11}, {9}, {.stride = 1}},  // 81 taps: the generic kernel
      {3,
       Shape{1, 2, 5, 6, 4},
       {2, 3, 2},
       {.stride = {1, 2, 2}, .padding = {1, 1, 0}, .dilation = {1, 1, 2}}},
  };
}

class PoolCases : public ::testing::TestWithParam<PoolKind> {};

TEST_P(PoolCases, ValuesMatchNaiveLoops) {
  for (const Case& c : cases()) {
    distop::nn::Pool<double> pool(GetParam(), c.dims, c.kernel, c.options);
    Var<double> x = distinct_input(c.input);
    Tape tape;
    auto y = pool.forward(tape, x);
    const auto g = WindowGeometry::ordinary(
        Shape(std::vector<std::int64_t>(c.input.begin() + 2, c.input.end())), pool.windows());
    const auto expected = reference(GetParam(), x.value().local().to_vector(), c.input, g);
    const auto got = y.value().local().to_vector();
    ASSERT_EQ(got.size(), expected.size()) << g.str();
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], 1e-14) << g.str() << ", output " << i;
    EXPECT_EQ(y.space(), pool.output_space(x.space()));
  }
}

TEST_P(PoolCases, GradientMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.input.str());
    distop::nn::Pool<double> pool(GetParam(), c.dims, c.kernel, c.options);
    Var<double> x = distinct_input(c.input);
    const auto r = test::random_tensor<double>(pool.output_space(x.space()), 5);
    test::expect_gradients_match(
        [&](Tape& tape) { return test::weighted_sum(tape, pool.forward(tape, x), r); }, {x});
  }
}

// The float kernels (their own vector forms) give the double ones' outputs and input gradients,
// for every case (the double input is the float one widened, so every window's argmax is the same).
TEST_P(PoolCases, FloatMatchesDouble) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.input.str());
    const distop::nn::Pool<double> pd(GetParam(), c.dims, c.kernel, c.options);
    const distop::nn::Pool<float> pf(GetParam(), c.dims, c.kernel, c.options);
    test::expect_float_matches_double(
        space_of(c.input), [&](Tape& t, const Var<double>& x) { return pd.forward(t, x); },
        [&](Tape& t, const Var<float>& x) { return pf.forward(t, x); }, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Pool, PoolCases, ::testing::Values(PoolKind::max, PoolKind::avg),
                         [](const auto& param_info) {
                           return std::string(param_info.param == PoolKind::max ? "Max" : "Avg");
                         });

TEST(MaxPool, TiesGoToTheFirstTapAndOverlapsSum) {
  // [1, 1, 4], kernel 2, stride 1: windows {0,1}, {1,2}, {2,3} over equal values take the first
  // tap each, so entries 0, 1, 2 get one output gradient each, entry 3 none.
  distop::nn::Pool<double> pool(PoolKind::max, 1, {2}, {.stride = 1});
  DistTensor<double> xv(space_of(Shape{1, 1, 4}));
  xv.local().fill(1.0);
  Var<double> x(xv, true);
  Tape tape;
  auto y = pool.forward(tape, x);
  DistTensor<double> r(y.space());
  r.local().copy_from(Tensor<double>::from_vector(Shape{1, 1, 3}, {1, 10, 100}));
  auto l = test::weighted_sum(tape, y, r);
  distop::backward(tape, l);
  EXPECT_EQ(x.grad().local().to_vector(), (std::vector<double>{1, 10, 100, 0}));
}

TEST(MaxPool, NaNPropagatesFromItsFirstTapAndAllInfiniteWindowsKeepTheFirst) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Kernel 3, stride 1 over 8 entries: six windows.
  const auto x = Tensor<double>::from_vector(Shape{1, 1, 8}, {1, nan, 5, 2, nan, -inf, -inf, -inf});
  const auto g = WindowGeometry::ordinary(Shape{8}, {ConvWindow{3, 1, 0, 1}});
  Tensor<double> y(Shape{1, 1, 6});
  distop::kernels::ArgmaxView argmax;
  distop::kernels::max_pool_forward(x, y, argmax, g);
  const auto yv = y.to_vector();
  auto host = Kokkos::create_mirror_view(argmax);
  Kokkos::deep_copy(host, argmax);
  // {1, NaN, 5} and {NaN, 5, 2}: the NaN at 1; {5, 2, NaN} and {2, NaN, -inf}: the NaN at 4;
  // {NaN, -inf, -inf}: the NaN at 4; {-inf, -inf, -inf}: the first, 5.
  const std::vector<std::int64_t> expected{1, 1, 4, 4, 4, 5};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(host(i), expected[i]) << "output " << i;
    if (i < 5)
      EXPECT_TRUE(std::isnan(yv[i])) << "output " << i;
    else
      EXPECT_EQ(yv[i], -inf);
  }
}

// Windows that tile the last axis (2x2 stride 2, 3x3 stride 3) take a kernel of their own on the
// host: the same first-tap-in-row-major-order ties, NaN propagation and all-infinite windows.
TEST(MaxPool, TilingWindowsKeepTiesNaNAndInfinities) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // [1, 1, 2, 8]: four 2x2 windows.
  //   {1, 5 / 5, 2}: tie across rows, the first in row-major order is row 0, column 1 (index 1);
  //   {5, 1 / nan, 7}: the NaN (index 10); {nan, nan / 3, 9}: the first NaN (index 4);
  //   {-inf, -inf / -inf, -inf}: the first tap (index 6).
  const auto x = Tensor<double>::from_vector(
      Shape{1, 1, 2, 8}, {1, 5, 5, 1, nan, nan, -inf, -inf, 5, 2, nan, 7, 3, 9, -inf, -inf});
  const auto g =
      WindowGeometry::ordinary(Shape{2, 8}, {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}});
  Tensor<double> y(Shape{1, 1, 1, 4});
  distop::kernels::ArgmaxView argmax;
  distop::kernels::max_pool_forward(x, y, argmax, g);
  auto host = Kokkos::create_mirror_view(argmax);
  Kokkos::deep_copy(host, argmax);
  const auto yv = y.to_vector();
  EXPECT_EQ(yv[0], 5);
  EXPECT_TRUE(std::isnan(yv[1]) && std::isnan(yv[2]));
  EXPECT_EQ(yv[3], -inf);
  const std::vector<std::int64_t> expected{1, 10, 4, 6};
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(host(i), expected[i]) << i;

  // 3x3 stride 3 over [2, 2, 6, 7] (one column left over), random values with planted ties,
  // against the reference loops.
  std::vector<double> v(2 * 2 * 6 * 7);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 37) % 11);
  const Shape xs{2, 2, 6, 7};
  const auto g3 =
      WindowGeometry::ordinary(Shape{6, 7}, {ConvWindow{3, 3, 0, 1}, ConvWindow{3, 3, 0, 1}});
  Tensor<double> y3(Shape{2, 2, 2, 2});
  distop::kernels::ArgmaxView a3;
  distop::kernels::max_pool_forward(Tensor<double>::from_vector(xs, v), y3, a3, g3);
  auto h3 = Kokkos::create_mirror_view(a3);
  Kokkos::deep_copy(h3, a3);
  const auto y3v = y3.to_vector();
  for (std::int64_t p = 0; p < 4; ++p)
    for (std::int64_t o1 = 0; o1 < 2; ++o1)
      for (std::int64_t o2 = 0; o2 < 2; ++o2) {
        double best = -inf;
        std::int64_t at = -1;
        for (std::int64_t j1 = 0; j1 < 3; ++j1)
          for (std::int64_t j2 = 0; j2 < 3; ++j2) {
            const std::int64_t i = p * 42 + (o1 * 3 + j1) * 7 + o2 * 3 + j2;
            if (v[static_cast<std::size_t>(i)] > best) {
              best = v[static_cast<std::size_t>(i)];
              at = i;
            }
          }
        const auto t = static_cast<std::size_t>((p * 2 + o1) * 2 + o2);
        EXPECT_EQ(y3v[t], best);
        EXPECT_EQ(h3(t), at) << "window " << t;
      }
}

// The hand-vectorised form of 2-wide tiling windows (AVX-512, where the CPU has it) and the
// portable one give the same maxima and the same winners, ties and NaN included: rows shorter
// than, as long as and longer than a vector, windows of 2 and 4 input rows, float and double.
template <class T>
void expect_simd_pooling_matches_portable() {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  struct Shape3 {
    Shape x;
    std::vector<ConvWindow> windows;
  };
  const std::vector<Shape3> shapes{
      {Shape{2, 3, 4, 2}, {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}}},    // 1 output a row
      {Shape{3, 2, 10, 11}, {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}}},  // 5, a column over
      {Shape{1, 2, 6, 32}, {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}}},   // 16
      {Shape{1, 2, 4, 70}, {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}}},   // 35
      {Shape{2, 2, 9, 28}, {ConvWindow{3, 3, 0, 1}, ConvWindow{2, 2, 0, 1}}},   // 3 rows
      {Shape{1, 2, 4, 6, 18},
       {ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}, ConvWindow{2, 2, 0, 1}}},  // 4 rows
  };
  for (const auto& sh : shapes) {
    SCOPED_TRACE(sh.x.str());
    std::vector<T> v(static_cast<std::size_t>(sh.x.numel()));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = i % 13 == 5 ? nan : static_cast<T>((i * 37) % 7);  // many ties, some NaN
    const auto x = Tensor<T>::from_vector(sh.x, v);
    const auto g = WindowGeometry::ordinary(
        Shape(std::vector<std::int64_t>(sh.x.begin() + 2, sh.x.end())), sh.windows);
    std::vector<std::int64_t> ys{sh.x[0], sh.x[1]};
    for (int a = 0; a < g.dims(); ++a) ys.push_back(g.out[a]);
    Tensor<T> y_simd{Shape(ys)}, y_portable{Shape(ys)};
    distop::kernels::ArgmaxView a_simd, a_portable;
    distop::kernels::max_pool_forward(x, y_simd, a_simd, g);
    {
      const distop::test::SimdCapScope portable(16);
      distop::kernels::max_pool_forward(x, y_portable, a_portable, g);
    }
    auto hs = Kokkos::create_mirror_view(a_simd);
    auto hp = Kokkos::create_mirror_view(a_portable);
    Kokkos::deep_copy(hs, a_simd);
    Kokkos::deep_copy(hp, a_portable);
    const auto vs = y_simd.to_vector(), vp = y_portable.to_vector();
    for (std::size_t i = 0; i < vs.size(); ++i) {
      EXPECT_TRUE(vs[i] == vp[i] || (std::isnan(vs[i]) && std::isnan(vp[i]))) << i;
      EXPECT_EQ(hs(i), hp(i)) << i;
    }
  }
}

TEST(MaxPool, VectorisedAndPortableFormsAgree) {
  expect_simd_pooling_matches_portable<float>();
  expect_simd_pooling_matches_portable<double>();
}

TEST(MaxPool, OverlappingWindowsSumOnTheSharedMaximum) {
  // The maximum 5 at index 2 lies in all three windows of kernel 3, stride 1 over 5 entries.
  distop::nn::Pool<double> pool(PoolKind::max, 1, {3}, {.stride = 1});
  DistTensor<double> xv(space_of(Shape{1, 1, 5}));
  xv.local().copy_from(Tensor<double>::from_vector(Shape{1, 1, 5}, {1, 2, 5, 3, 4}));
  Var<double> x(xv, true);
  Tape tape;
  auto y = pool.forward(tape, x);
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{5, 5, 5}));
  DistTensor<double> r(y.space());
  r.local().copy_from(Tensor<double>::from_vector(Shape{1, 1, 3}, {1, 2, 4}));
  auto l = test::weighted_sum(tape, y, r);
  distop::backward(tape, l);
  EXPECT_EQ(x.grad().local().to_vector(), (std::vector<double>{0, 0, 7, 0, 0}));
}

TEST(MaxPool, PaddingIsIgnoredNotZero) {
  // All inputs negative: a zero padding would win, -infinity padding does not.
  distop::nn::Pool<double> pool(PoolKind::max, 1, {2}, {.stride = 2, .padding = 1});
  DistTensor<double> xv(space_of(Shape{1, 1, 3}));
  xv.local().copy_from(Tensor<double>::from_vector(Shape{1, 1, 3}, {-3, -2, -1}));
  Tape tape;
  auto y = pool.forward(tape, Var<double>(xv));
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{-3, -1}));
}

TEST(AvgPool, DividesByTheFullKernelCountingPadding) {
  distop::nn::Pool<double> pool(PoolKind::avg, 1, {2}, {.stride = 2, .padding = 1});
  DistTensor<double> xv(space_of(Shape{1, 1, 3}));
  xv.local().copy_from(Tensor<double>::from_vector(Shape{1, 1, 3}, {2, 4, 6}));
  Tape tape;
  auto y = pool.forward(tape, Var<double>(xv));
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{1, 5}));
}

TEST(MaxPool, WindowOverPaddingOnlyIsAnError) {
  WindowGeometry g{{2}, {1}, {1}, {3}, Shape{4}, Shape{1}};  // taps -3, -2
  Tensor<float> x(Shape{1, 1, 4}), y(Shape{1, 1, 1});
  distop::kernels::ArgmaxView argmax;
  EXPECT_THROW(distop::kernels::max_pool_forward(x, y, argmax, g), distop::Error);
  // Average pooling of padding alone is well defined (zero).
  EXPECT_NO_THROW(distop::kernels::avg_pool_forward(x, y, g));
}

TEST(PoolWindows, DefaultsAndErrors) {
  const auto w = distop::nn::pool_windows(2, {3, 2}, {});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].stride, 3);  // stride = kernel by default
  EXPECT_EQ(w[1].stride, 2);
  EXPECT_EQ(w[1].padding, 0);
  EXPECT_THROW(distop::nn::pool_windows(0, {2}, {}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(4, {2}, {}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(2, {2, 2, 2}, {}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(1, {0}, {}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(1, {3}, {.stride = 0}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(1, {3}, {.stride = 1, .padding = 2}),
               distop::Error);  // 2 > 3 / 2
  EXPECT_THROW(distop::nn::pool_windows(1, {3}, {.stride = 1, .padding = -1}), distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(1, {3}, {.stride = 1, .padding = 1, .dilation = 0}),
               distop::Error);
  EXPECT_THROW(distop::nn::pool_windows(2, {3}, {.stride = {1, 1, 1}}), distop::Error);
}

TEST(Pool, BadInputsAreErrors) {
  distop::nn::Pool<double> pool(PoolKind::max, 2, {2}, {});
  Tape tape;
  // Rank 3 input for a 2-D pooling.
  EXPECT_THROW(pool.output_space(space_of(Shape{1, 2, 4})), distop::Error);
  EXPECT_THROW(pool.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{1, 2, 4})))),
               distop::Error);
  // A window larger than the input.
  distop::nn::Pool<double> big(PoolKind::avg, 1, {5}, {});
  EXPECT_THROW(big.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{1, 1, 4})))),
               distop::Error);
  // An output space that does not fit the geometry.
  Var<double> x(DistTensor<double>(space_of(Shape{1, 1, 4, 4})));
  const auto g = WindowGeometry::ordinary(Shape{4, 4}, pool.windows());
  EXPECT_THROW(distop::nn::max_pool(tape, x, g, space_of(Shape{1, 1, 3, 2})), distop::Error);
  EXPECT_THROW(distop::nn::avg_pool(tape, x, g, space_of(Shape{1, 1, 2})), distop::Error);
  // A geometry of the wrong spatial extents.
  const auto g3 = WindowGeometry::ordinary(Shape{6, 4}, pool.windows());
  EXPECT_THROW(distop::nn::max_pool(tape, x, g3, space_of(Shape{1, 1, 3, 2})), distop::Error);
  EXPECT_THROW(WindowGeometry::ordinary(Shape{4, 4}, {ConvWindow{}}), distop::Error);
  EXPECT_EQ(tape.size(), 0u);
}

}  // namespace
