// nn::transpose: values, the output space, the gradient, bad input.
#include "distop/nn/transpose.hpp"

#include <gtest/gtest.h>

#include "distop/kernels/transpose.hpp"
#include "gradcheck.hpp"

namespace {

using distop::Error;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

TEST(Transpose, ValuesAndSpace) {
  for (const Shape& s : {Shape{3, 5}, Shape{1, 4}, Shape{6, 1}, Shape{40, 70}}) {
    SCOPED_TRACE(s.str());
    Var<double> x(random_tensor<double>(local_space(s), 1), false);
    Tape tape;
    auto y = nn::transpose(tape, x);
    EXPECT_EQ(y.space().global_shape(), (Shape{s[1], s[0]}));
    const auto xv = x.value().local().to_vector();
    const auto yv = y.value().local().to_vector();
    for (std::int64_t i = 0; i < s[0]; ++i)
      for (std::int64_t j = 0; j < s[1]; ++j)
        ASSERT_EQ(yv[static_cast<std::size_t>(j * s[0] + i)],
                  xv[static_cast<std::size_t>(i * s[1] + j)]);
  }
}

TEST(Transpose, GradientMatchesFiniteDifferences) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4}), 2), true);
  const auto r = random_tensor<double>(local_space(Shape{4, 3}), 3);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::transpose(t, x), r); }, {x});
  // Twice is the identity, and its gradient too.
  const auto r2 = random_tensor<double>(x.space(), 4);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::transpose(t, nn::transpose(t, x)), r2); },
      {x});
}

TEST(Transpose, KernelAccumulates) {
  const auto x = random_tensor<float>(local_space(Shape{2, 3}), 5).local();
  Tensor<float> y(Shape{3, 2});
  y.fill(1.0f);
  distop::kernels::transpose(x, 2.0f, y);  // y = x^T + 2
  const auto xv = x.to_vector(), yv = y.to_vector();
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(yv[j * 2 + i], xv[i * 3 + j] + 2.0f);
  Tensor<float> wrong(Shape{2, 3});
  EXPECT_THROW(distop::kernels::transpose(x, 0.0f, wrong), Error);
}

TEST(Transpose, OnlyTwoDimensional) {
  Tape tape;
  EXPECT_THROW(nn::transpose(tape, Var<double>(random_tensor<double>(local_space(Shape{4}), 1))),
               Error);
  EXPECT_THROW(
      nn::transpose(tape, Var<double>(random_tensor<double>(local_space(Shape{2, 2, 2}), 1))),
      Error);
}

}  // namespace
