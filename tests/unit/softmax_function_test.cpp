// nn::softmax and nn::log_softmax as functions: values against naive formulas for rows of 1 to
// 20,000 classes, numerical stability, gradients, float against double; the row kernels' long-row
// (team) path through softmax_cross_entropy and softmax_backward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/kernels/softmax.hpp"
#include "distop/nn/log_softmax.hpp"
#include "distop/nn/softmax.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace kernels = distop::kernels;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

// log softmax of every row of x [rows, n], naively in long double.
std::vector<double> naive_log_softmax(const std::vector<double>& x, std::size_t n) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    long double max = x[r * n];
    for (std::size_t j = 0; j < n; ++j) max = std::max<long double>(max, x[r * n + j]);
    long double s = 0;
    for (std::size_t j = 0; j < n; ++j) s += std::exp(static_cast<long double>(x[r * n + j]) - max);
    for (std::size_t j = 0; j < n; ++j)
      y[r * n + j] = static_cast<double>(x[r * n + j] - max - std::log(s));
  }
  return y;
}

TEST(SoftmaxFunction, ValuesForShortAndLongRows) {
  for (const Shape& s : {Shape{4, 1}, Shape{3, 10}, Shape{2, 3, 7}, Shape{3, 20000}}) {
    SCOPED_TRACE(s.str());
    const std::size_t n = static_cast<std::size_t>(s[s.rank() - 1]);
    Var<double> x(random_tensor<double>(local_space(s), 1, -5.0, 5.0), false);
    Tape tape;
    const auto p = nn::softmax(tape, x).value().local().to_vector();
    const auto lp = nn::log_softmax(tape, x).value().local().to_vector();
    const auto want = naive_log_softmax(x.value().local().to_vector(), n);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(lp[i], want[i], 1e-12) << "entry " << i;
      ASSERT_NEAR(p[i], std::exp(want[i]), 1e-15) << "entry " << i;
    }
    for (std::size_t r = 0; r < p.size() / n; ++r) {
      double total = 0;
      for (std::size_t j = 0; j < n; ++j) total += p[r * n + j];
      EXPECT_NEAR(total, 1.0, 1e-12);
    }
  }
}

TEST(SoftmaxFunction, RowsOfOneClass) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 1}), 2), true);
  Tape tape;
  auto p = nn::softmax(tape, x);
  EXPECT_EQ(p.value().local().to_vector(), std::vector<double>(3, 1.0));
  auto l = test::weighted_sum(tape, p, random_tensor<double>(p.space(), 3));
  distop::backward(tape, l);
  EXPECT_EQ(x.grad().local().to_vector(), std::vector<double>(3, 0.0));
}

TEST(SoftmaxFunction, HugeLogitsInFloat) {
  DistTensor<float> xv(local_space(Shape{2, 2}));
  xv.local().copy_from(Tensor<float>::from_vector(Shape{2, 2}, {1000.0f, 0.0f, -1000.0f, 1000.0f}));
  Var<float> x(xv, true);
  Tape tape;
  auto lp = nn::log_softmax(tape, x);
  auto p = nn::softmax(tape, x);
  const auto lv = lp.value().local().to_vector();
  const auto pv = p.value().local().to_vector();
  for (float v : lv) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(lv[0], 0.0f);
  EXPECT_EQ(lv[1], -1000.0f);
  EXPECT_EQ(lv[2], -2000.0f);
  EXPECT_EQ(pv, (std::vector<float>{1.0f, 0.0f, 0.0f, 1.0f}));
  DistTensor<float> ones(lp.space());
  ones.local().fill(1.0f);
  auto l = test::weighted_sum(tape, lp, ones);
  distop::backward(tape, l);
  for (float g : x.grad().local().to_vector()) EXPECT_TRUE(std::isfinite(g));
}

TEST(SoftmaxFunction, GradientsMatchFiniteDifferences) {
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 5}}) {
    SCOPED_TRACE(s.str());
    Var<double> x(random_tensor<double>(local_space(s), 4, -2.0, 2.0), true);
    const auto r = random_tensor<double>(x.space(), 5);
    test::expect_gradients_match(
        [&](Tape& t) { return test::weighted_sum(t, nn::softmax(t, x), r); }, {x});
    // Used twice (a Var accumulates both gradients).
    test::expect_gradients_match(
        [&](Tape& t) { return test::weighted_sum(t, nn::softmax(t, nn::softmax(t, x)), r); }, {x});
  }
}

TEST(SoftmaxFunction, FloatMatchesDouble) {
  for (const Shape& s : {Shape{7}, Shape{3, 10}, Shape{2, 16384}}) {
    SCOPED_TRACE(s.str());
    test::expect_float_matches_double(
        local_space(s), [](Tape& t, const Var<double>& x) { return nn::softmax(t, x); },
        [](Tape& t, const Var<float>& x) { return nn::softmax(t, x); }, 1e-6, 6, -4.0, 4.0);
    test::expect_float_matches_double(
        local_space(s), [](Tape& t, const Var<double>& x) { return nn::log_softmax(t, x); },
        [](Tape& t, const Var<float>& x) { return nn::log_softmax(t, x); }, 1e-5, 6, -4.0, 4.0);
  }
}

// The kernels on rows of 50,000 classes: the cross-entropy, its probabilities and softmax's
// gradient against the naive formulas.
TEST(SoftmaxFunction, KernelsOnLongRows) {
  const std::int64_t rows = 2, n = 50000;
  const auto x = random_tensor<double>(local_space(Shape{rows, n}), 7, -8.0, 8.0).local();
  const auto want = naive_log_softmax(x.to_vector(), static_cast<std::size_t>(n));
  const std::vector<std::int32_t> labels = {17, 49999};
  Tensor<double> probs(Shape{rows, n});
  const double loss = kernels::softmax_cross_entropy(x, labels, &probs);
  EXPECT_NEAR(loss, -want[17] - want[static_cast<std::size_t>(n + 49999)], 1e-10);
  const auto pv = probs.to_vector();
  for (std::size_t i = 0; i < pv.size(); ++i) ASSERT_NEAR(pv[i], std::exp(want[i]), 1e-15);
  // softmax_backward: dx = p (dp - <dp, p>) row by row, accumulated onto dx with beta = 1.
  const auto dp = random_tensor<double>(local_space(Shape{rows, n}), 8).local();
  Tensor<double> dx(Shape{rows, n});
  dx.fill(1.0);
  kernels::softmax_backward(probs, dp, 1.0, dx);
  const auto dpv = dp.to_vector(), dxv = dx.to_vector();
  for (std::size_t r = 0; r < 2; ++r) {
    double dot = 0;
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j)
      dot += dpv[r * n + j] * pv[r * n + j];
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
      const std::size_t i = r * n + j;
      ASSERT_NEAR(dxv[i], 1.0 + pv[i] * (dpv[i] - dot), 1e-15) << "entry " << i;
    }
  }
}

}  // namespace
