// nn::exp, log, sqrt, rsqrt, clamp and logsigmoid: values against <cmath>, gradients against finite
// differences, clamp at and beyond its bounds, logsigmoid far from 0, float against double.
#include "distop/nn/pointwise.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Error;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

template <class T>
Var<T> var_of(const Shape& shape, const std::vector<T>& values, bool requires_grad = true) {
  DistTensor<T> x(local_space(shape));
  x.local().copy_from(Tensor<T>::from_vector(shape, values));
  return Var<T>(std::move(x), requires_grad);
}

struct UnaryCase {
  const char* name;
  Var<double> (*op)(Tape&, const Var<double>&);
  Var<float> (*op_float)(Tape&, const Var<float>&);
  double (*naive)(double);
  double lo, hi;  // the inputs drawn
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", nn::exp<double>, nn::exp<float>, [](double x) { return std::exp(x); }, -3, 3},
      {"log", nn::log<double>, nn::log<float>, [](double x) { return std::log(x); }, 0.2, 5},
      {"sqrt", nn::sqrt<double>, nn::sqrt<float>, [](double x) { return std::sqrt(x); }, 0.2, 5},
      {"rsqrt", nn::rsqrt<double>, nn::rsqrt<float>, [](double x) { return 1 / std::sqrt(x); }, 0.2,
       5},
      {"logsigmoid", nn::logsigmoid<double>, nn::logsigmoid<float>,
       [](double x) { return -std::log1p(std::exp(-x)); }, -6, 6},
  };
}

TEST(Pointwise, ValuesAndGradients) {
  const TensorSpace space = local_space(Shape{3, 5});
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Var<double> x(random_tensor<double>(space, 1, c.lo, c.hi), true);
    Tape tape;
    const auto y = c.op(tape, x).value().local().to_vector();
    const auto xv = x.value().local().to_vector();
    for (std::size_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y[i], c.naive(xv[i]), 1e-14 * std::max(1.0, std::abs(y[i]))) << "entry " << i;
    tape.clear();
    const auto r = random_tensor<double>(space, 2);
    test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, c.op(t, x), r); },
                                 {x});
  }
}

TEST(Pointwise, FloatMatchesDouble) {
  for (const auto& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    test::expect_float_matches_double(
        local_space(Shape{4, 7}), [&](Tape& t, const Var<double>& x) { return c.op(t, x); },
        [&](Tape& t, const Var<float>& x) { return c.op_float(t, x); }, 1e-6, 3, c.lo, c.hi);
  }
}

TEST(Pointwise, ExpOfAVarUsedTwiceAccumulates) {
  Var<double> x(random_tensor<double>(local_space(Shape{2, 3}), 4), true);
  const auto r = random_tensor<double>(x.space(), 5);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::exp(t, nn::exp(t, x)), r); }, {x});
}

// torch.clamp: the gradient passes where min <= x <= max, the bounds included.
TEST(Pointwise, ClampValuesAndGradientAtTheBounds) {
  const std::vector<double> x = {-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0};
  auto check = [&](std::optional<double> lo, std::optional<double> hi,
                   const std::vector<double>& want_y, const std::vector<double>& want_mask) {
    Var<double> xv = var_of<double>(Shape{7}, x);
    Tape tape;
    auto y = nn::clamp(tape, xv, lo, hi);
    EXPECT_EQ(y.value().local().to_vector(), want_y);
    const auto r = random_tensor<double>(y.space(), 6);
    auto l = test::weighted_sum(tape, y, r);
    distop::backward(tape, l);
    const auto g = xv.grad().local().to_vector();
    const auto rv = r.local().to_vector();
    for (std::size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(g[i], want_mask[i] * rv[i]) << "x = " << x[i];
  };
  check(-1.0, 1.0, {-1, -1, -0.5, 0, 0.5, 1, 1}, {0, 1, 1, 1, 1, 1, 0});
  check(-1.0, std::nullopt, {-1, -1, -0.5, 0, 0.5, 1, 2}, {0, 1, 1, 1, 1, 1, 1});
  check(std::nullopt, 0.5, {-2, -1, -0.5, 0, 0.5, 0.5, 0.5}, {1, 1, 1, 1, 1, 0, 0});
  // min > max: every entry is max, and no gradient passes (no x has min <= x <= max).
  check(1.0, -1.0, {-1, -1, -1, -1, -1, -1, -1}, {0, 0, 0, 0, 0, 0, 0});
  // Bounds beyond float's range saturate instead of overflowing.
  Var<float> xf = var_of<float>(Shape{2}, {-3.0f, 3.0f});
  Tape tape;
  EXPECT_EQ(nn::clamp(tape, xf, -1e300, 1e300).value().local().to_vector(),
            (std::vector<float>{-3.0f, 3.0f}));
}

TEST(Pointwise, ClampGradientAwayFromTheBounds) {
  Var<double> x(random_tensor<double>(local_space(Shape{4, 5}), 7, -2.0, 2.0), true);
  const auto r = random_tensor<double>(x.space(), 8);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::clamp(t, x, -0.7, 1.1), r); }, {x});
}

TEST(Pointwise, ClampKeepsNaN) {
  Var<double> x = var_of<double>(Shape{1}, {std::numeric_limits<double>::quiet_NaN()});
  Tape tape;
  EXPECT_TRUE(std::isnan(nn::clamp(tape, x, 0.0, 1.0).value().local().to_vector()[0]));
}

TEST(Pointwise, ClampWithoutBoundsIsAnError) {
  Var<double> x = var_of<double>(Shape{1}, {1.0});
  Tape tape;
  EXPECT_THROW(nn::clamp(tape, x, std::nullopt, std::nullopt), Error);
}

// log(sigmoid(x)) written naively overflows (exp(1000)) or loses everything (log(0)).
TEST(Pointwise, LogSigmoidIsStableFarFromZero) {
  Var<float> x = var_of<float>(Shape{4}, {-1000.0f, -30.0f, 30.0f, 1000.0f});
  Tape tape;
  auto y = nn::logsigmoid(tape, x);
  const auto yv = y.value().local().to_vector();
  EXPECT_FLOAT_EQ(yv[0], -1000.0f);
  EXPECT_FLOAT_EQ(yv[1], -30.0f);
  EXPECT_NEAR(yv[2], -std::exp(-30.0), 1e-20);
  EXPECT_EQ(yv[3], 0.0f);
  DistTensor<float> ones(y.space());
  ones.local().fill(1.0f);
  auto l = test::weighted_sum(tape, y, ones);
  distop::backward(tape, l);
  const auto g = x.grad().local().to_vector();  // sigmoid(-x)
  EXPECT_FLOAT_EQ(g[0], 1.0f);
  EXPECT_FLOAT_EQ(g[1], 1.0f);
  EXPECT_NEAR(g[2], std::exp(-30.0), 1e-20);
  EXPECT_EQ(g[3], 0.0f);
}

}  // namespace
