// nn::log_softmax: values against a naive computation, stability, the gradient, and bad input.
#include "distop/nn/log_softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/kernels/softmax.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
namespace test = distop::test;

TensorSpace space_of(const Shape& s) {
  return TensorSpace(s, Partition::self(Shape(std::vector<std::int64_t>(s.extents().size(), 1))));
}

TEST(LogSoftmax, ValuesMatchNaiveOverTheLastAxis) {
  const Shape s{2, 3, 4};
  auto xv = test::random_tensor<double>(space_of(s), 1, -3.0, 3.0);
  Tape tape;
  const auto y = distop::nn::log_softmax(tape, Var<double>(xv)).value().local().to_vector();
  const auto x = xv.local().to_vector();
  for (std::size_t r = 0; r < 6; ++r) {
    double z = 0;
    for (std::size_t j = 0; j < 4; ++j) z += std::exp(x[r * 4 + j]);
    for (std::size_t j = 0; j < 4; ++j)
      EXPECT_NEAR(y[r * 4 + j], x[r * 4 + j] - std::log(z), 1e-14);
  }
}

TEST(LogSoftmax, StableForLargeLogits) {
  DistTensor<float> xv(space_of(Shape{1, 3}));
  xv.local().copy_from(Tensor<float>::from_vector(Shape{1, 3}, {1000.0f, 1000.0f, -1000.0f}));
  Tape tape;
  const auto y = distop::nn::log_softmax(tape, Var<float>(xv)).value().local().to_vector();
  EXPECT_NEAR(y[0], -std::log(2.0), 1e-6);
  EXPECT_NEAR(y[1], -std::log(2.0), 1e-6);
  EXPECT_TRUE(std::isfinite(y[2]));
}

TEST(LogSoftmax, GradientMatchesFiniteDifferences) {
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 5}}) {
    Var<double> x(test::random_tensor<double>(space_of(s), 2, -2.0, 2.0), true);
    const auto r = test::random_tensor<double>(x.space(), 3);
    test::expect_gradients_match(
        [&](Tape& tape) { return test::weighted_sum(tape, distop::nn::log_softmax(tape, x), r); },
        {x});
  }
}

TEST(LogSoftmax, GradientAccumulatesWhenUsedTwice) {
  Var<double> x(test::random_tensor<double>(space_of(Shape{3, 4}), 4), true);
  const auto r = test::random_tensor<double>(x.space(), 5);
  test::expect_gradients_match(
      [&](Tape& tape) {
        auto a = distop::nn::log_softmax(tape, x);
        auto b = distop::nn::log_softmax(tape, a);
        return test::weighted_sum(tape, b, r);
      },
      {x});
}

TEST(LogSoftmax, FloatMatchesDouble) {
  for (const Shape& s : {Shape{7}, Shape{3, 10}, Shape{2, 3, 33}}) {
    SCOPED_TRACE(s.str());
    test::expect_float_matches_double(
        space_of(s), [](Tape& t, const Var<double>& x) { return distop::nn::log_softmax(t, x); },
        [](Tape& t, const Var<float>& x) { return distop::nn::log_softmax(t, x); }, 1e-5, 6, -4.0,
        4.0);
  }
}

TEST(LogSoftmax, BackwardShapeMismatchIsAnError) {
  Tensor<double> out(Shape{2, 3}), dout(Shape{2, 3}), dx(Shape{3, 2}), flat(Shape{6});
  EXPECT_THROW(distop::kernels::log_softmax_backward(out, dout, 0.0, dx), distop::Error);
  EXPECT_THROW(distop::kernels::log_softmax_backward(flat, flat, 0.0, flat), distop::Error);
  EXPECT_NO_THROW(distop::kernels::log_softmax_backward(out, dout, 0.0, dout));
}

}  // namespace
