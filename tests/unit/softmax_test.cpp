#include "distop/kernels/softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using distop::Shape;
using distop::Tensor;
namespace kernels = distop::kernels;

const std::vector<double> kLogits = {0.5,   -1.0, 2.0,  0.0,  //
                                     3.0,   3.0,  -2.0, 1.0,  //
                                     -0.25, 0.75, 0.1,  -4.0};
const std::vector<std::int32_t> kLabels = {2, 1, 3};

// log softmax of row r of kLogits at class j, computed the naive way.
double naive_log_softmax(std::size_t r, std::size_t j) {
  double s = 0;
  for (std::size_t c = 0; c < 4; ++c) s += std::exp(kLogits[r * 4 + c]);
  return kLogits[r * 4 + j] - std::log(s);
}

template <class T>
class SoftmaxTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SoftmaxTest, Scalars);

TYPED_TEST(SoftmaxTest, MatchesNaiveFormulas) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  auto x = Tensor<T>::from_vector(Shape{3, 4}, std::vector<T>(kLogits.begin(), kLogits.end()));
  Tensor<T> p(Shape{3, 4}), lp(Shape{3, 4}), probs(Shape{3, 4}), d(Shape{3, 4});
  kernels::softmax(x, p);
  kernels::log_softmax(x, lp);
  const double loss = kernels::softmax_cross_entropy(x, kLabels, &probs);
  kernels::softmax_cross_entropy_backward(probs, kLabels, T(0.5), d);
  double expected_loss = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    expected_loss -= naive_log_softmax(r, static_cast<std::size_t>(kLabels[r]));
    for (std::size_t j = 0; j < 4; ++j) {
      const std::size_t i = r * 4 + j;
      const double ls = naive_log_softmax(r, j);
      EXPECT_NEAR(p.to_vector()[i], std::exp(ls), tol);
      EXPECT_NEAR(probs.to_vector()[i], std::exp(ls), tol);
      EXPECT_NEAR(lp.to_vector()[i], ls, 4 * tol);
      const double onehot = static_cast<std::int32_t>(j) == kLabels[r] ? 1.0 : 0.0;
      EXPECT_NEAR(d.to_vector()[i], 0.5 * (std::exp(ls) - onehot), tol);
    }
  }
  EXPECT_NEAR(loss, expected_loss, 10 * tol);
  EXPECT_EQ(kernels::count_correct(x, kLabels), 1);  // row 0 only (row 1 ties: first max wins)
  EXPECT_EQ(kernels::count_correct(x, {2, 0, 1}), 3);
}

TYPED_TEST(SoftmaxTest, HugeLogitsStayFinite) {
  using T = TypeParam;
  auto x = Tensor<T>::from_vector(Shape{2, 3}, {T(1e4), T(0), T(-1e4), T(-1e4), T(1e4), T(1e4)});
  Tensor<T> probs(Shape{2, 3}), lp(Shape{2, 3});
  const double loss = kernels::softmax_cross_entropy(x, {1, 2}, &probs);
  kernels::log_softmax(x, lp);
  // Row 0: 1e4 + log(1 + e^-1e4 + e^-2e4) = 1e4; row 1: log 2.
  EXPECT_NEAR(loss, 1e4 + std::log(2.0), 1e-9 * 1e4);
  for (T v : probs.to_vector()) EXPECT_TRUE(std::isfinite(v));
  for (T v : lp.to_vector()) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(probs.to_vector()[0], T(1));
  EXPECT_NEAR(probs.to_vector()[4], 0.5, 1e-7);
}

// Logits so large that max + log(sum of exp) rounds log(sum) away, in float and in double alike:
// log softmax and the cross-entropy subtract the row maximum first, and keep log 2.
TYPED_TEST(SoftmaxTest, HugeLogitsKeepTheLogOfTheSum) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  const double log2 = std::log(2.0);
  auto x = Tensor<T>::from_vector(Shape{2, 3}, {T(1e20), T(1e20), T(-1e20),  //
                                                T(-1e20), T(1e20), T(1e20)});
  Tensor<T> lp(Shape{2, 3}), probs(Shape{2, 3});
  kernels::log_softmax(x, lp);
  const auto v = lp.to_vector();
  EXPECT_NEAR(v[0], -log2, tol);
  EXPECT_NEAR(v[1], -log2, tol);
  EXPECT_NEAR(v[4], -log2, tol);
  EXPECT_NEAR(v[5], -log2, tol);
  EXPECT_NEAR(v[2], -2e20, 1e-6 * 2e20);
  EXPECT_NEAR(v[3], -2e20, 1e-6 * 2e20);
  EXPECT_NEAR(kernels::softmax_cross_entropy(x, {0, 2}, &probs), 2 * log2, 2 * tol);
  EXPECT_NEAR(kernels::softmax_cross_entropy(x, {2, 0}), 4e20, 1e-6 * 4e20);
  for (std::size_t i : {0, 1, 4, 5}) EXPECT_NEAR(probs.to_vector()[i], 0.5, tol);
}

// Rows of no classes: nothing to compute and nothing to write (no row maximum is read).
TYPED_TEST(SoftmaxTest, RowsOfNoClassesAreEmpty) {
  using T = TypeParam;
  for (const Shape& s : {Shape{3, 0}, Shape{0, 4}, Shape{0, 0}}) {
    SCOPED_TRACE(s.str());
    Tensor<T> x(s), y(s), dx(s);
    kernels::softmax(x, y);
    kernels::log_softmax(x, y);
    kernels::log_softmax_backward(y, x, T(0), dx);
    EXPECT_EQ(y.numel(), 0);
  }
  Tensor<T> none(Shape{0, 0});
  EXPECT_EQ(kernels::softmax_cross_entropy(none, {}), 0.0);
  EXPECT_EQ(kernels::count_correct(none, {}), 0);
}

TEST(Softmax, BadLabelsAreErrors) {
  auto x = Tensor<double>::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THROW(kernels::softmax_cross_entropy(x, {0, 3}), distop::Error);
  EXPECT_THROW(kernels::softmax_cross_entropy(x, {-1, 0}), distop::Error);
  EXPECT_THROW(kernels::softmax_cross_entropy(x, {0}), distop::Error);
  EXPECT_THROW(kernels::count_correct(x, {0, 1, 2}), distop::Error);
  Tensor<double> d(Shape{2, 3});
  EXPECT_THROW(kernels::softmax_cross_entropy_backward(x, {5, 0}, 1.0, d), distop::Error);
  Tensor<double> wrong(Shape{3, 2});
  EXPECT_THROW(kernels::softmax(x, wrong), distop::Error);
  EXPECT_THROW(kernels::softmax_cross_entropy(x, {0, 1}, &x), distop::Error);  // aliasing
}

}  // namespace
