// BatchNorm: values and running statistics against a naive computation, gradients against finite
// differences in training and evaluation mode, and bad input.
#include "distop/nn/batch_norm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
using distop::nn::BatchNorm;
namespace test = distop::test;

TensorSpace space_of(const Shape& s) {
  return TensorSpace(s, Partition::self(Shape(std::vector<std::int64_t>(s.extents().size(), 1))));
}

// Per channel mean and biased variance of x [N, C, S...] (host values).
struct Stats {
  std::vector<double> mean, var;
};
Stats naive_stats(const std::vector<double>& x, const Shape& s) {
  const std::int64_t n = s[0], c = s[1], inner = s.numel() / (n * c);
  Stats st{std::vector<double>(static_cast<std::size_t>(c)),
           std::vector<double>(static_cast<std::size_t>(c))};
  const double m = static_cast<double>(n * inner);
  for (std::int64_t k = 0; k < c; ++k) {
    double sum = 0, sq = 0;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < inner; ++i)
        sum += x[static_cast<std::size_t>((b * c + k) * inner + i)];
    const double mean = sum / m;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < inner; ++i) {
        const double d = x[static_cast<std::size_t>((b * c + k) * inner + i)] - mean;
        sq += d * d;
      }
    st.mean[static_cast<std::size_t>(k)] = mean;
    st.var[static_cast<std::size_t>(k)] = sq / m;
  }
  return st;
}

// Gives the layer a weight and bias other than 1 and 0.
template <class T>
void randomize_affine(BatchNorm<T>& bn, std::uint64_t seed) {
  bn.weight().value().local().copy_from(
      test::random_tensor<T>(bn.weight().space(), seed, 0.5, 1.5).local());
  bn.bias().value().local().copy_from(test::random_tensor<T>(bn.bias().space(), seed + 1).local());
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s{Shape{6, 3}, Shape{4, 3, 5}, Shape{2, 2, 3, 4},
                                    Shape{2, 3, 2, 3, 2}};
  return s;
}

TEST(BatchNorm, TrainingValuesAndRunningStatisticsMatchNaive) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    const std::int64_t c = s[1];
    BatchNorm<double> bn(c);
    randomize_affine(bn, 3);
    // An offset large against the spread: two-pass statistics keep their accuracy.
    auto xv = test::random_tensor<double>(space_of(s), 7, 99.0, 101.0);
    Tape tape;
    auto y = bn.forward(tape, Var<double>(xv));
    const auto x = xv.local().to_vector();
    const auto st = naive_stats(x, s);
    const auto w = bn.weight().value().local().to_vector();
    const auto b = bn.bias().value().local().to_vector();
    const auto got = y.value().local().to_vector();
    const std::int64_t inner = s.numel() / (s[0] * c);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto k = static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % c);
      const double expected = w[k] * (x[i] - st.mean[k]) / std::sqrt(st.var[k] + 1e-5) + b[k];
      EXPECT_NEAR(got[i], expected, 1e-10) << "entry " << i;
    }
    const double m = static_cast<double>(s.numel() / c);
    const auto rm = bn.running_mean().local().to_vector();
    const auto rv = bn.running_var().local().to_vector();
    for (std::size_t k = 0; k < static_cast<std::size_t>(c); ++k) {
      EXPECT_NEAR(rm[k], 0.1 * st.mean[k], 1e-12);
      EXPECT_NEAR(rv[k], 0.9 + 0.1 * st.var[k] * m / (m - 1), 1e-12);
    }
  }
}

TEST(BatchNorm, EvaluationUsesRunningStatistics) {
  const Shape s{3, 2, 4};
  BatchNorm<double> bn(2);
  randomize_affine(bn, 5);
  bn.running_mean().local().copy_from(Tensor<double>::from_vector(Shape{2}, {0.5, -1.0}));
  bn.running_var().local().copy_from(Tensor<double>::from_vector(Shape{2}, {2.0, 0.25}));
  bn.eval();
  EXPECT_FALSE(bn.training());
  auto xv = test::random_tensor<double>(space_of(s), 9);
  Tape tape;
  auto y = bn.forward(tape, Var<double>(xv));
  const auto x = xv.local().to_vector();
  const auto w = bn.weight().value().local().to_vector();
  const auto b = bn.bias().value().local().to_vector();
  const double rm[] = {0.5, -1.0}, rv[] = {2.0, 0.25};
  const auto got = y.value().local().to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::size_t k = (i / 4) % 2;
    EXPECT_NEAR(got[i], w[k] * (x[i] - rm[k]) / std::sqrt(rv[k] + 1e-5) + b[k], 1e-12);
  }
  // Nothing updated in evaluation mode.
  EXPECT_EQ(bn.running_mean().local().to_vector(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(bn.running_var().local().to_vector(), (std::vector<double>{2.0, 0.25}));
}

TEST(BatchNorm, TrainingGradientMatchesFiniteDifferences) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    BatchNorm<double> bn(s[1]);
    randomize_affine(bn, 11);
    Var<double> x(test::random_tensor<double>(space_of(s), 13, -2.0, 2.0), true);
    const auto r = test::random_tensor<double>(x.space(), 17);
    test::expect_gradients_match(
        [&](Tape& tape) { return test::weighted_sum(tape, bn.forward(tape, x), r); },
        {x, bn.weight(), bn.bias()}, 1e-6, 1e-6);
  }
}

TEST(BatchNorm, EvaluationGradientMatchesFiniteDifferences) {
  const Shape s{3, 2, 2, 3};
  BatchNorm<double> bn(2);
  randomize_affine(bn, 19);
  bn.running_mean().local().copy_from(Tensor<double>::from_vector(Shape{2}, {0.3, -0.2}));
  bn.running_var().local().copy_from(Tensor<double>::from_vector(Shape{2}, {1.5, 0.5}));
  bn.eval();
  Var<double> x(test::random_tensor<double>(space_of(s), 23), true);
  const auto r = test::random_tensor<double>(x.space(), 29);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, bn.forward(tape, x), r); },
      {x, bn.weight(), bn.bias()});
}

TEST(BatchNorm, WithoutAffineNormalisesOnly) {
  BatchNorm<double> bn(2, {1e-5, 0.1, false});
  EXPECT_TRUE(bn.parameters().empty());
  EXPECT_THROW(bn.weight(), distop::Error);
  EXPECT_THROW(bn.bias(), distop::Error);
  Var<double> x(test::random_tensor<double>(space_of(Shape{4, 2, 3}), 31), true);
  const auto r = test::random_tensor<double>(x.space(), 37);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, bn.forward(tape, x), r); }, {x}, 1e-6,
      1e-6);
  // Zero mean and (biased) variance var / (var + eps) per channel.
  Tape tape;
  const auto y = bn.forward(tape, x).value().local().to_vector();
  const auto sx = naive_stats(x.value().local().to_vector(), Shape{4, 2, 3});
  const auto sy = naive_stats(y, Shape{4, 2, 3});
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_NEAR(sy.mean[k], 0, 1e-12);
    EXPECT_NEAR(sy.var[k], sx.var[k] / (sx.var[k] + 1e-5), 1e-12);
  }
}

// The float layer against the double one with the same weights, in training and in evaluation
// (after a training step has moved the running statistics): outputs and the gradients of the
// input, the weight and the bias.
TEST(BatchNorm, FloatMatchesDouble) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(s.str());
    BatchNorm<float> bf(s[1]);
    BatchNorm<double> bd(s[1]);
    randomize_affine(bf, 43);
    bd.weight().value().local().copy_from(test::widened(bf.weight().value()).local());
    bd.bias().value().local().copy_from(test::widened(bf.bias().value()).local());
    for (const bool training : {true, false}) {
      SCOPED_TRACE(training ? "training" : "evaluation");
      bf.train(training);
      bd.train(training);
      for (auto* v : {&bf.weight(), &bf.bias()}) v->zero_grad();
      for (auto* v : {&bd.weight(), &bd.bias()}) v->zero_grad();
      test::expect_float_matches_double(
          space_of(s), [&](Tape& t, const Var<double>& x) { return bd.forward(t, x); },
          [&](Tape& t, const Var<float>& x) { return bf.forward(t, x); }, 1e-5, 47, -2.0, 2.0);
      test::expect_near_all(bf.weight().grad().local().to_vector(),
                            bd.weight().grad().local().to_vector(), 1e-5, "weight gradient");
      test::expect_near_all(bf.bias().grad().local().to_vector(),
                            bd.bias().grad().local().to_vector(), 1e-5, "bias gradient");
      test::expect_near_all(bf.running_mean().local().to_vector(),
                            bd.running_mean().local().to_vector(), 1e-6, "running mean");
    }
  }
}

TEST(BatchNorm, BadInputsAreErrors) {
  EXPECT_THROW(BatchNorm<double>(0), distop::Error);
  EXPECT_THROW(BatchNorm<double>(2, {0.0, 0.1, true}), distop::Error);
  EXPECT_THROW(BatchNorm<double>(2, {1e-5, 1.5, true}), distop::Error);
  BatchNorm<double> bn(3);
  Tape tape;
  // Wrong channel count, too low and too high a rank.
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{2, 4, 3})))),
               distop::Error);
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{3})))),
               distop::Error);
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{2, 3, 2, 2, 2, 2})))),
               distop::Error);
  // One value per channel in training (PyTorch's error too); fine in evaluation.
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{1, 3})))),
               distop::Error);
  bn.eval();
  EXPECT_NO_THROW(bn.forward(tape, Var<double>(DistTensor<double>(space_of(Shape{1, 3})))));
}

}  // namespace
