// Dropout: the mask's statistics and values, its independence of the box it is drawn for, the
// gradient, the identity cases and bad input.
#include "distop/nn/dropout.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/kernels/dropout.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace test = distop::test;

TEST(Dropout, DropsAboutPAndScalesTheRest) {
  const double p = 0.3;
  auto xv = test::random_tensor<double>(test::local_batch_space(100, 50), 1, 0.5, 1.5);
  Tape tape;
  auto y = distop::nn::dropout(tape, Var<double>(xv), p, 42);
  const auto x = xv.local().to_vector();
  const auto v = y.value().local().to_vector();
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(v[i], x[i] / (1 - p), 1e-15);
    }
  }
  // 5000 draws: the dropped fraction lies within 5 standard deviations (0.0065) of p.
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(v.size()), p, 0.033);
  // Another seed, another mask.
  auto y2 = distop::nn::dropout(tape, Var<double>(xv), p, 43);
  EXPECT_NE(y2.value().local().to_vector(), v);
}

TEST(Dropout, MaskDependsOnTheGlobalIndexOnly) {
  // The box [1:3, 2:5] of a [4, 6] tensor drops exactly what the whole tensor drops there.
  const Shape global{4, 6};
  std::vector<double> ones(24, 1.0);
  Tensor<double> whole = Tensor<double>::from_vector(global, ones), y_whole(global);
  distop::kernels::dropout(whole, global, {0, 0}, 0.5, 7, 0.0, y_whole);
  Tensor<double> box = Tensor<double>::from_vector(Shape{2, 3}, std::vector<double>(6, 1.0)),
                 y_box(Shape{2, 3});
  distop::kernels::dropout(box, global, {1, 2}, 0.5, 7, 0.0, y_box);
  const auto w = y_whole.to_vector();
  const auto b = y_box.to_vector();
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(b[r * 3 + c], w[(r + 1) * 6 + c + 2]);
}

TEST(Dropout, GradientMatchesFiniteDifferences) {
  Var<double> x(test::random_tensor<double>(test::local_batch_space(5, 7), 3), true);
  const auto r = test::random_tensor<double>(x.space(), 4);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, distop::nn::dropout(tape, x, 0.4, 9), r); },
      {x});
}

TEST(Dropout, IdentityWhenNotTrainingOrPZeroAndZeroAtPOne) {
  Var<double> x(test::random_tensor<double>(test::local_batch_space(3, 4), 5), true);
  Tape tape;
  EXPECT_TRUE(distop::nn::dropout(tape, x, 0.5, 1, false).same_as(x));
  EXPECT_TRUE(distop::nn::dropout(tape, x, 0.0, 1).same_as(x));
  EXPECT_EQ(tape.size(), 0u);
  auto y = distop::nn::dropout(tape, x, 1.0, 1);
  EXPECT_EQ(y.value().local().to_vector(), std::vector<double>(12, 0.0));
}

TEST(Dropout, BadProbabilityIsAnError) {
  Var<float> x(DistTensor<float>(test::local_batch_space(2, 2)));
  Tape tape;
  EXPECT_THROW(distop::nn::dropout(tape, x, -0.1, 1), distop::Error);
  EXPECT_THROW(distop::nn::dropout(tape, x, 1.5, 1), distop::Error);
  Tensor<float> t(Shape{2, 2}), u(Shape{2, 2});
  EXPECT_THROW(distop::kernels::dropout(t, Shape{2, 2}, {1, 0}, 0.5, 1, 0.0f, u), distop::Error);
  EXPECT_THROW(distop::kernels::dropout(t, Shape{2, 2, 1}, {0, 0}, 0.5, 1, 0.0f, u), distop::Error);
}

}  // namespace
