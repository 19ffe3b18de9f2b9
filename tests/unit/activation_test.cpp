#include "distop/nn/activation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Tape;
using distop::Var;
namespace test = distop::test;

// x with every entry at least 0.1 away from relu's kink.
Var<double> input() {
  auto x = test::random_tensor<double>(test::local_batch_space(4, 5), 11, -2.0, 2.0);
  auto v = x.local().to_vector();
  for (double& e : v) e += e >= 0 ? 0.1 : -0.1;
  x.local().copy_from(distop::Tensor<double>::from_vector(x.space().local_shape(), v));
  return Var<double>(x, true);
}

template <class Fn>
void check_activation(Fn fn) {
  Var<double> x = input();
  const auto r = test::random_tensor<double>(x.space(), 12);
  test::expect_gradients_match([&](Tape& tape) { return test::weighted_sum(tape, fn(tape, x), r); },
                               {x});
}

TEST(Activation, ReluGradientMatchesFiniteDifferences) {
  check_activation([](Tape& t, const Var<double>& x) { return distop::nn::relu(t, x); });
}
TEST(Activation, SigmoidGradientMatchesFiniteDifferences) {
  check_activation([](Tape& t, const Var<double>& x) { return distop::nn::sigmoid(t, x); });
}
TEST(Activation, TanhGradientMatchesFiniteDifferences) {
  check_activation([](Tape& t, const Var<double>& x) { return distop::nn::tanh(t, x); });
}

TEST(Activation, ChainedActivationsMatchFiniteDifferences) {
  Var<double> x = input();
  const auto r = test::random_tensor<double>(x.space(), 13);
  test::expect_gradients_match(
      [&](Tape& tape) {
        auto h = distop::nn::tanh(tape, distop::nn::sigmoid(tape, distop::nn::relu(tape, x)));
        return test::weighted_sum(tape, h, r);
      },
      {x});
}

TEST(Activation, ValuesAndNoRecordingWithoutGradient) {
  DistTensor<float> xv(test::local_batch_space(1, 3));
  xv.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{1, 3}, {-1, 0.5f, 2}));
  Var<float> x(xv, false);
  Tape tape;
  auto y = distop::nn::relu(tape, x);
  auto s = distop::nn::sigmoid(tape, x);
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.space() == x.space());
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<float>{0, 0.5f, 2}));
  EXPECT_NEAR(s.value().local().to_vector()[1], 1 / (1 + std::exp(-0.5)), 1e-7);
  Var<float> xg(xv, true);
  distop::nn::tanh(tape, xg);
  EXPECT_EQ(tape.names(), (std::vector<std::string>{"tanh"}));
}

// A NaN reaching relu (weights that diverged, say) stays NaN, as in PyTorch: were it zeroed, the
// layers after it would see zeros and the loss could stay finite, hiding the divergence.
TEST(Activation, ReluPassesNaNOn) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DistTensor<float> xv(test::local_batch_space(1, 4));
  xv.local().copy_from(
      distop::Tensor<float>::from_vector(distop::Shape{1, 4}, {-1, nan, 2, -0.5f}));
  Tape tape;
  const auto y = distop::nn::relu(tape, Var<float>(xv, false)).value().local().to_vector();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_EQ(y[3], 0.0f);
}

}  // namespace
