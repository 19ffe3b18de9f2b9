#include "distop/loss/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/nn/linear.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Tape;
using distop::Var;
namespace loss = distop::loss;
namespace test = distop::test;

const std::vector<std::int32_t> kLabels = {2, 0, 1, 2, 3};

TEST(CrossEntropy, IsTheMeanOfMinusLogSoftmaxAtTheLabel) {
  auto x = test::random_tensor<double>(test::local_batch_space(5, 4), 1, -3.0, 3.0);
  Tape tape;
  auto l = loss::cross_entropy(tape, Var<double>(x), kLabels);
  EXPECT_EQ(l.space().global_shape(), (distop::Shape{1}));
  const auto v = x.local().to_vector();
  double expected = 0;
  for (std::size_t r = 0; r < 5; ++r) {
    double s = 0;
    for (std::size_t c = 0; c < 4; ++c) s += std::exp(v[r * 4 + c]);
    expected += std::log(s) - v[r * 4 + static_cast<std::size_t>(kLabels[r])];
  }
  EXPECT_NEAR(l.value().local().to_vector()[0], expected / 5, 1e-14);
  EXPECT_EQ(tape.size(), 0u);  // nothing requires a gradient
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  Var<double> x(test::random_tensor<double>(test::local_batch_space(5, 4), 2, -3.0, 3.0), true);
  test::expect_gradients_match([&](Tape& tape) { return loss::cross_entropy(tape, x, kLabels); },
                               {x});
}

TEST(CrossEntropy, ThroughALinearLayerMatchesFiniteDifferences) {
  distop::nn::Linear<double> lin(3, 4, {.seed = 8});
  Var<double> x(test::random_tensor<double>(test::local_batch_space(5, 3), 9), true);
  test::expect_gradients_match(
      [&](Tape& tape) { return loss::cross_entropy(tape, lin.forward(tape, x), kLabels); },
      {x, lin.weight(), lin.bias()});
}

TEST(CrossEntropy, HugeLogitsGiveFiniteLossAndGradient) {
  DistTensor<double> x(test::local_batch_space(2, 3));
  x.local().copy_from(
      distop::Tensor<double>::from_vector(distop::Shape{2, 3}, {1e4, 0, -1e4, -1e4, 1e4, 1e4}));
  Var<double> xv(x, true);
  Tape tape;
  auto l = loss::cross_entropy(tape, xv, {1, 2});
  const double value = l.value().local().to_vector()[0];
  EXPECT_TRUE(std::isfinite(value));
  EXPECT_NEAR(value, (1e4 + std::log(2.0)) / 2, 1e-9);
  distop::backward(tape, l);
  const auto g = xv.grad().local().to_vector();
  const std::vector<double> expected = {0.5, -0.5, 0, 0, 0.25, -0.25};
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(std::isfinite(g[i]));
    EXPECT_NEAR(g[i], expected[i], 1e-15);
  }

  DistTensor<float> xf(test::local_batch_space(1, 2));
  xf.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{1, 2}, {-1e4f, 1e4f}));
  Tape tf;
  auto lf = loss::cross_entropy(tf, Var<float>(xf), {0});
  EXPECT_NEAR(lf.value().local().to_vector()[0], 2e4f, 1.0f);
}

TEST(CrossEntropy, BadLabelsAreErrors) {
  Var<double> x(DistTensor<double>(test::local_batch_space(2, 3)), true);
  Tape tape;
  EXPECT_THROW(loss::cross_entropy(tape, x, {0, 3}), distop::Error);
  EXPECT_THROW(loss::cross_entropy(tape, x, {-1, 0}), distop::Error);
  EXPECT_THROW(loss::cross_entropy(tape, x, {0}), distop::Error);
  EXPECT_EQ(tape.size(), 0u);
}

TEST(CrossEntropy, CountsCorrectArgmaxPredictions) {
  DistTensor<double> x(test::local_batch_space(3, 3));
  x.local().copy_from(
      distop::Tensor<double>::from_vector(distop::Shape{3, 3}, {0, 1, 0, 5, 5, 1, -1, -2, -3}));
  EXPECT_EQ(loss::count_correct(x, {1, 1, 0}), 2);  // row 1 ties: the first maximum wins
  EXPECT_EQ(loss::count_correct(x, {1, 0, 0}), 3);
  EXPECT_THROW(loss::count_correct(x, {1, 0}), distop::Error);
}

}  // namespace
