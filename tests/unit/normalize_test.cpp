// nn::normalize: values against torch's definition, a zero row and rows below eps, the gradient on
// both sides of eps, long rows, float against double, bad input.
#include "distop/nn/normalize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

// x / max(||x||, eps) over the last axis, in double.
std::vector<double> naive(const std::vector<double>& x, std::int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / static_cast<std::size_t>(n); ++r) {
    double s = 0;
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) s += x[r * n + j] * x[r * n + j];
    const double d = std::max(std::sqrt(s), eps);
    for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) y[r * n + j] = x[r * n + j] / d;
  }
  return y;
}

TEST(Normalize, ValuesOverTheLastAxis) {
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 6}, Shape{2, 12000}}) {
    SCOPED_TRACE(s.str());
    Var<double> x(random_tensor<double>(local_space(s), 1, -2.0, 2.0), false);
    Tape tape;
    const auto y = nn::normalize(tape, x).value().local().to_vector();
    const auto want = naive(x.value().local().to_vector(), s[s.rank() - 1], 1e-12);
    for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-15) << "entry " << i;
  }
}

TEST(Normalize, ZeroRowStaysZeroAndItsGradientIsDyOverEps) {
  DistTensor<double> xv(local_space(Shape{2, 3}));
  xv.local().copy_from(Tensor<double>::from_vector(Shape{2, 3}, {0, 0, 0, 3, 0, 4}));
  Var<double> x(xv, true);
  Tape tape;
  auto y = nn::normalize(tape, x, 1e-6);
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{0, 0, 0, 0.6, 0, 0.8}));
  const auto r = random_tensor<double>(y.space(), 2);
  auto l = test::weighted_sum(tape, y, r);
  distop::backward(tape, l);
  const auto g = x.grad().local().to_vector();
  const auto rv = r.local().to_vector();
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_TRUE(std::isfinite(g[j]));
    EXPECT_DOUBLE_EQ(g[j], rv[j] / 1e-6);
  }
}

TEST(Normalize, GradientMatchesFiniteDifferencesOnBothSidesOfEps) {
  // Rows of norm about 0.2-0.6 against eps 0.4: some rows divide by their norm, others by eps.
  Var<double> x(random_tensor<double>(local_space(Shape{6, 3}), 3, -0.3, 0.3), true);
  const auto r = random_tensor<double>(x.space(), 4);
  for (double eps : {1e-12, 0.4}) {
    SCOPED_TRACE(eps);
    test::expect_gradients_match(
        [&](Tape& t) { return test::weighted_sum(t, nn::normalize(t, x, eps), r); }, {x});
  }
  Var<double> x3(random_tensor<double>(local_space(Shape{2, 2, 5}), 5), true);
  const auto r3 = random_tensor<double>(x3.space(), 6);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::normalize(t, x3), r3); }, {x3});
}

TEST(Normalize, FloatMatchesDouble) {
  for (const Shape& s : {Shape{4, 9}, Shape{2, 10000}}) {
    SCOPED_TRACE(s.str());
    test::expect_float_matches_double(
        local_space(s), [](Tape& t, const Var<double>& x) { return nn::normalize(t, x); },
        [](Tape& t, const Var<float>& x) { return nn::normalize(t, x); }, 1e-5);
  }
}

TEST(Normalize, OneEntryRowsNormaliseToTheirSign) {
  // (A split last axis, the one bad input, is checked in tests/mpi/local_ops_test.cpp.)
  DistTensor<double> xv(local_space(Shape{3, 1}));
  xv.local().copy_from(Tensor<double>::from_vector(Shape{3, 1}, {0.25, -7.0, 0.0}));
  Tape tape;
  EXPECT_EQ(nn::normalize(tape, Var<double>(xv)).value().local().to_vector(),
            (std::vector<double>{1.0, -1.0, 0.0}));
}

}  // namespace
