#include "distop/loss/mse.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "distop/nn/activation.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Tape;
using distop::Var;
namespace test = distop::test;

TEST(Mse, IsTheMeanOfSquaredDifferences) {
  DistTensor<float> x(test::local_batch_space(2, 2)), t(test::local_batch_space(2, 2));
  x.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{2, 2}, {1, 2, 3, 4}));
  t.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{2, 2}, {0, 2, 5, 1}));
  Var<float> xv(x, true);
  Tape tape;
  auto l = distop::loss::mse(tape, xv, t);
  EXPECT_EQ(l.space().global_shape(), (distop::Shape{1}));
  EXPECT_FLOAT_EQ(l.value().local().to_vector()[0], (1 + 0 + 4 + 9) / 4.0f);
  distop::backward(tape, l);
  // 2 (x - t) / 4
  EXPECT_EQ(xv.grad().local().to_vector(), (std::vector<float>{0.5f, 0, -1, 1.5f}));
}

TEST(Backward, ASecondReplayForTheSameLossIsAnErrorAndANewForwardPassWorks) {
  DistTensor<float> x(test::local_batch_space(2, 2)), t(test::local_batch_space(2, 2));
  x.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{2, 2}, {1, 2, 3, 4}));
  Var<float> xv(x, true);
  Tape tape;
  auto l = distop::loss::mse(tape, xv, t);
  distop::backward(tape, l);
  const std::vector<float> once = xv.grad().local().to_vector();
  EXPECT_TRUE(tape.replayed());
  // Would add nothing: the tape's entries are spent.
  EXPECT_THROW(distop::backward(tape, l), distop::Error);
  EXPECT_EQ(xv.grad().local().to_vector(), once);
  // A new forward pass records again; its gradient accumulates onto the first.
  auto l2 = distop::loss::mse(tape, xv, t);
  EXPECT_FALSE(tape.replayed());
  distop::backward(tape, l2);
  const std::vector<float> twice = xv.grad().local().to_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  // A loss that needs no gradient records nothing; replaying the spent tape for it is allowed.
  Var<float> frozen(x, false);
  auto l3 = distop::loss::mse(tape, frozen, t);
  EXPECT_NO_THROW(distop::backward(tape, l3));
}

TEST(Mse, GradientMatchesFiniteDifferences) {
  const auto space = test::local_batch_space(3, 4);
  Var<double> x(test::random_tensor<double>(space, 1), true);
  const auto target = test::random_tensor<double>(space, 2);
  test::expect_gradients_match(
      [&](Tape& tape) { return distop::loss::mse(tape, distop::nn::sigmoid(tape, x), target); },
      {x});
}

TEST(Mse, TargetInAnotherSpaceIsAnError) {
  Var<double> x(DistTensor<double>(test::local_batch_space(3, 4)), true);
  Tape tape;
  EXPECT_THROW(distop::loss::mse(tape, x, DistTensor<double>(test::local_batch_space(4, 3))),
               distop::Error);
}

}  // namespace
