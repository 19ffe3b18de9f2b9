#include "distop/nn/linear.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/nn/activation.hpp"
#include "distop/nn/functional.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Tape;
using distop::Var;
using distop::nn::Linear;
namespace test = distop::test;

TEST(Linear, InitialisesLikePyTorchAndDeterministically) {
  Linear<double> a(5, 3, {.seed = 42}), b(5, 3, {.seed = 42}), c(5, 3, {.seed = 43});
  EXPECT_EQ(a.weight().space().global_shape(), (distop::Shape{3, 5}));
  EXPECT_EQ(a.bias().space().global_shape(), (distop::Shape{3}));
  ASSERT_EQ(a.parameters().size(), 2u);
  EXPECT_TRUE(a.parameters()[0].same_as(a.weight()));
  EXPECT_TRUE(a.weight().requires_grad() && a.bias().requires_grad());
  const double bound = 1 / std::sqrt(5.0);
  const auto w = a.weight().value().local().to_vector();
  const auto bias = a.bias().value().local().to_vector();
  for (double v : w) EXPECT_LE(std::abs(v), bound);
  for (double v : bias) EXPECT_LE(std::abs(v), bound);
  EXPECT_NE(w[0], w[1]);
  EXPECT_NE(w[0], bias[0]);  // weight and bias draw from different streams
  EXPECT_EQ(w, b.weight().value().local().to_vector());
  EXPECT_EQ(bias, b.bias().value().local().to_vector());
  EXPECT_NE(w, c.weight().value().local().to_vector());
}

TEST(Linear, ForwardIsXWTransposePlusB) {
  Linear<double> lin(4, 3, {.seed = 7});
  auto x = test::random_tensor<double>(test::local_batch_space(2, 4), 3);
  Tape tape;
  auto y = lin.forward(tape, Var<double>(x));
  EXPECT_TRUE(y.space() == x.space().with_extent(1, 3));
  const auto xv = x.local().to_vector(), w = lin.weight().value().local().to_vector(),
             b = lin.bias().value().local().to_vector(), yv = y.value().local().to_vector();
  for (int i = 0; i < 2; ++i) {
    for (int o = 0; o < 3; ++o) {
      double s = b[o];
      for (int k = 0; k < 4; ++k) s += xv[i * 4 + k] * w[o * 4 + k];
      EXPECT_NEAR(yv[i * 3 + o], s, 1e-14);
    }
  }
}

// The layer's cached output space: found again for a copy of the input's space (the same
// object), for an equal space built anew, and replaced for another batch size.
TEST(Linear, OutputSpaceFollowsTheInputSpace) {
  Linear<double> lin(4, 3, {.seed = 7});
  const distop::TensorSpace a = test::local_batch_space(2, 4);
  const distop::TensorSpace copy = a;
  const distop::TensorSpace rebuilt = test::local_batch_space(2, 4);
  const distop::TensorSpace other = test::local_batch_space(5, 4);
  EXPECT_TRUE(copy.same_object(a));
  EXPECT_FALSE(rebuilt.same_object(a));
  EXPECT_TRUE(rebuilt == a);
  auto out_space = [&](const distop::TensorSpace& s) {
    Tape tape;
    return lin.forward(tape, Var<double>(DistTensor<double>(s))).space();
  };
  const distop::TensorSpace want = a.with_extent(1, 3);
  EXPECT_TRUE(out_space(a) == want);
  EXPECT_TRUE(out_space(copy) == want);
  EXPECT_TRUE(out_space(rebuilt) == want);
  EXPECT_TRUE(out_space(other) == other.with_extent(1, 3));
  EXPECT_FALSE(out_space(other) == want);
  EXPECT_TRUE(out_space(a) == want);
}

// Runs forward and backward with dL/dy = 1 and returns the weight gradient's values.
std::vector<double> weight_grad_of_step(Linear<double>& lin, const Var<double>& x) {
  Tape tape;
  auto y = lin.forward(tape, x);
  y.grad().local().fill(1.0);
  tape.backward();
  return lin.weight().grad().local().to_vector();
}

TEST(Linear, ZeroGradKeepsTheGradientStorageForTheNextStep) {
  Linear<double> lin(4, 3, {.seed = 5});
  Var<double> x(test::random_tensor<double>(test::local_batch_space(2, 4), 6));
  const auto first = weight_grad_of_step(lin, x);
  const double* storage = lin.weight().grad().local().data();
  lin.weight().zero_grad();
  EXPECT_FALSE(lin.weight().has_grad());
  // The next step writes over the kept storage: the same values, not their sum.
  EXPECT_EQ(weight_grad_of_step(lin, x), first);
  EXPECT_EQ(lin.weight().grad().local().data(), storage);
  // A gradient someone still holds is never written over: the next one gets new storage.
  const DistTensor<double> held = lin.weight().grad();
  lin.weight().zero_grad();
  EXPECT_EQ(weight_grad_of_step(lin, x), first);
  EXPECT_NE(lin.weight().grad().local().data(), storage);
  EXPECT_EQ(held.local().to_vector(), first);
  // grad() after zero_grad() is zero, though the kept storage held values.
  const double* kept = lin.weight().grad().local().data();
  lin.weight().zero_grad();
  for (double v : lin.weight().grad().local().to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(lin.weight().grad().local().data(), kept);
  // release_grad() frees it.
  lin.weight().release_grad();
  EXPECT_FALSE(lin.weight().has_grad());
  EXPECT_TRUE(lin.weight().grad().local().data() != nullptr);
  EXPECT_THROW(lin.weight().new_grad_for_overwrite(), distop::Error);
}

TEST(Functional, ReinterpretAndAddBiasHandTheGradientOnWithoutACopy) {
  const auto space = test::local_batch_space(3, 4);
  // An equal view on another Partition object: reinterpret's target.
  const distop::TensorSpace other(space.global_shape(),
                                  distop::Partition::self(distop::Shape{1, 1}));
  ASSERT_FALSE(other == space);
  for (const bool view : {true, false}) {
    Var<double> x(test::random_tensor<double>(space, 1), true);
    Var<double> b(test::random_tensor<double>(
        distop::TensorSpace(distop::Shape{4}, distop::Partition::self(distop::Shape{1})), 2));
    Tape tape;
    Var<double> y =
        view ? distop::nn::reinterpret(tape, x, other) : distop::nn::add_bias(tape, x, b);
    const auto dy = test::random_tensor<double>(y.space(), 3);
    y.grad().local().copy_from(dy.local());
    const double* storage = y.grad().local().data();
    tape.backward();
    // x had no gradient: it takes y's storage, and y keeps none.
    EXPECT_EQ(x.grad().local().data(), storage);
    EXPECT_EQ(x.grad().local().to_vector(), dy.local().to_vector());
    EXPECT_FALSE(y.has_grad());
  }
  // A gradient someone still holds is copied, and one already there is added to.
  Var<double> x(test::random_tensor<double>(space, 4), true);
  x.grad().local().fill(1.0);
  Tape tape;
  Var<double> y = distop::nn::reinterpret(tape, x, other);
  DistTensor<double> held = y.grad();
  held.local().fill(2.0);
  tape.backward();
  for (double v : x.grad().local().to_vector()) EXPECT_EQ(v, 3.0);
  for (double v : held.local().to_vector()) EXPECT_EQ(v, 2.0);
  Var<double> x2(test::random_tensor<double>(space, 5), true);
  Tape tape2;
  Var<double> y2 = distop::nn::reinterpret(tape2, x2, other);
  DistTensor<double> held2 = y2.grad();
  held2.local().fill(4.0);
  tape2.backward();
  EXPECT_NE(x2.grad().local().data(), held2.local().data());
  for (double v : x2.grad().local().to_vector()) EXPECT_EQ(v, 4.0);
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Linear<double> lin(5, 3, {.seed = 1});
  Var<double> x(test::random_tensor<double>(test::local_batch_space(4, 5), 2), true);
  const auto r = test::random_tensor<double>(test::local_batch_space(4, 3), 3);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, lin.forward(tape, x), r); },
      {x, lin.weight(), lin.bias()});
}

TEST(Linear, WithoutBias) {
  Linear<double> lin(3, 2, distop::Partition::self(), {.bias = false, .seed = 5});
  EXPECT_FALSE(lin.has_bias());
  EXPECT_EQ(lin.parameters().size(), 1u);
  EXPECT_THROW(lin.bias(), distop::Error);
  Var<double> x(test::random_tensor<double>(test::local_batch_space(3, 3), 6), true);
  const auto r = test::random_tensor<double>(test::local_batch_space(3, 2), 7);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, lin.forward(tape, x), r); },
      {x, lin.weight()});
}

TEST(Linear, LayerAppliedTwiceAccumulatesItsGradients) {
  Linear<double> lin(4, 4, {.seed = 9});
  Var<double> x(test::random_tensor<double>(test::local_batch_space(3, 4), 10), true);
  const auto r = test::random_tensor<double>(x.space(), 11);
  auto loss = [&](Tape& tape) {
    auto h = distop::nn::tanh(tape, lin.forward(tape, x));
    return test::weighted_sum(tape, lin.forward(tape, h), r);
  };
  // The weight and bias gradients match only if both uses' contributions add up.
  test::expect_gradients_match(loss, {x, lin.weight(), lin.bias()});
  Tape tape;
  loss(tape);
  EXPECT_EQ(tape.names(), (std::vector<std::string>{"Linear", "tanh", "Linear", "weighted_sum"}));
}

TEST(Linear, InputWithoutGradientGetsNone) {
  Linear<double> lin(2, 2, {.seed = 1});
  Var<double> x(test::random_tensor<double>(test::local_batch_space(2, 2), 1), false);
  const auto r = test::random_tensor<double>(x.space(), 2);
  Tape tape;
  auto l = test::weighted_sum(tape, lin.forward(tape, x), r);
  distop::backward(tape, l);
  EXPECT_FALSE(x.has_grad());
  EXPECT_TRUE(lin.weight().has_grad());
  EXPECT_TRUE(lin.bias().has_grad());
}

TEST(Linear, FloatAgreesWithDouble) {
  Linear<float> lf(6, 4, {.seed = 3});
  Linear<double> ld(6, 4, {.seed = 3});
  auto xd = test::random_tensor<double>(test::local_batch_space(5, 6), 4);
  auto xf = test::random_tensor<float>(test::local_batch_space(5, 6), 4);
  Tape tape;
  const auto yf = lf.forward(tape, Var<float>(xf)).value().local().to_vector();
  const auto yd = ld.forward(tape, Var<double>(xd)).value().local().to_vector();
  ASSERT_EQ(yf.size(), yd.size());
  for (std::size_t i = 0; i < yf.size(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-5);
}

TEST(Linear, WrongInputsAreErrors) {
  Linear<double> lin(5, 3, {.seed = 1});
  Tape tape;
  Var<double> wrong_features(DistTensor<double>(test::local_batch_space(2, 4)));
  EXPECT_THROW(lin.forward(tape, wrong_features), distop::Error);
  Var<double> three_d(DistTensor<double>(distop::TensorSpace(
      distop::Shape{2, 5, 1}, distop::Partition::self(distop::Shape{1, 1, 1}))));
  EXPECT_THROW(lin.forward(tape, three_d), distop::Error);
  // A feature axis mapped to a grid axis of extent 1 is whole, so it is accepted.
  Var<double> one_part(DistTensor<double>(
      distop::TensorSpace(distop::Shape{2, 5}, distop::Partition::self(distop::Shape{1, 1}))));
  EXPECT_EQ(lin.forward(tape, one_part).space().global_shape(), (distop::Shape{2, 3}));
  EXPECT_THROW(Linear<double>(0, 3, {.seed = 1}), distop::Error);
}

}  // namespace
