// nn::sum and nn::mean over axes (keepdim on and off) and of everything, and the kernels behind
// them (kernels::sum_axes, broadcast_axes): values against naive loops, output spaces, gradients
// against finite differences, bad axes.
#include "distop/nn/reduction.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "distop/kernels/reduce.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Error;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace kernels = distop::kernels;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

// The sum of x (row-major, shape `shape`) over `axes`, one entry per kept index in row-major order.
std::vector<double> naive_sum(const std::vector<double>& x, const Shape& shape,
                              const std::vector<int>& axes,
                              const std::vector<double>* w = nullptr) {
  std::vector<bool> summed(static_cast<std::size_t>(shape.rank()), false);
  for (int a : axes) summed[static_cast<std::size_t>(a)] = true;
  std::int64_t kept = 1;
  for (int a = 0; a < shape.rank(); ++a)
    if (!summed[static_cast<std::size_t>(a)]) kept *= shape[a];
  std::vector<double> out(static_cast<std::size_t>(kept), 0.0);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank()), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t o = 0;
    for (int a = 0; a < shape.rank(); ++a)
      if (!summed[static_cast<std::size_t>(a)]) o = o * shape[a] + idx[static_cast<std::size_t>(a)];
    out[static_cast<std::size_t>(o)] += x[i] * (w ? (*w)[i] : 1.0);
    for (int a = shape.rank() - 1; a >= 0; --a) {
      if (++idx[static_cast<std::size_t>(a)] < shape[a]) break;
      idx[static_cast<std::size_t>(a)] = 0;
    }
  }
  return out;
}

struct AxesCase {
  Shape shape;
  std::vector<int> axes;
};

std::vector<AxesCase> axes_cases() {
  return {{Shape{3, 4}, {0}},
          {Shape{3, 4}, {1}},
          {Shape{3, 4}, {0, 1}},
          {Shape{2, 3, 4}, {0, 2}},
          {Shape{2, 3, 4}, {1}},
          {Shape{2, 3, 4}, {1, 2}},
          {Shape{2, 1, 4}, {1}},
          {Shape{2, 3, 1, 5}, {0, 2}},
          {Shape{2, 3, 4, 5}, {1, 3}},
          {Shape{2, 3, 4, 5}, {0, 3}},
          {Shape{7}, {0}},
          {Shape{3, 0, 2}, {1}}};
}

TEST(SumAxesKernel, MatchesNaiveWithWeightAndBeta) {
  for (const auto& c : axes_cases()) {
    SCOPED_TRACE(c.shape.str());
    const auto x = random_tensor<double>(local_space(c.shape), 1).local();
    const auto w = random_tensor<double>(local_space(c.shape), 2).local();
    const auto want = naive_sum(x.to_vector(), c.shape, c.axes);
    Tensor<double> out =
        Tensor<double>::uninitialized(Shape{static_cast<std::int64_t>(want.size())});
    kernels::sum_axes(x, c.axes, 2.0, 0.0, out);
    auto got = out.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], 2 * want[i], 1e-13);
    // Accumulating a weighted sum into what is there: out = 0.5 (sum x w) + 3 out.
    const auto wv = w.to_vector();
    const auto want_weighted = naive_sum(x.to_vector(), c.shape, c.axes, &wv);
    kernels::sum_axes(x, c.axes, 0.5, 3.0, out, &w);
    got = out.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], 0.5 * want_weighted[i] + 6 * want[i], 1e-13);
  }
}

TEST(SumAxesKernel, LongRowsAndEverything) {
  // Row sums of 3 rows of 20000 (the team-per-row path) and the sum of all 60000 entries, in float,
  // accumulated in double.
  const Shape shape{3, 20000};
  const auto xd = random_tensor<double>(local_space(shape), 3);
  const auto x = random_tensor<float>(local_space(shape), 3);
  const auto want_rows = naive_sum(xd.local().to_vector(), shape, {1});
  const auto want_all = naive_sum(xd.local().to_vector(), shape, {0, 1});
  Tensor<float> rows(Shape{3}), all(Shape{1});
  kernels::sum_axes(x.local(), {1}, 1.0f, 0.0f, rows);
  kernels::sum_axes(x.local(), {0, 1}, 1.0f, 0.0f, all);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(rows.to_vector()[i], want_rows[i], 1e-3);
  EXPECT_NEAR(all.to_vector()[0], want_all[0], 1e-3);
}

TEST(SumAxesKernel, BroadcastIsTheAdjoint) {
  // <sum_axes(x), y> = <x, broadcast_axes(y)> for random x and y.
  for (const auto& c : axes_cases()) {
    SCOPED_TRACE(c.shape.str());
    const auto x = random_tensor<double>(local_space(c.shape), 4).local();
    const auto kept = static_cast<std::int64_t>(naive_sum(x.to_vector(), c.shape, c.axes).size());
    const auto y = random_tensor<double>(local_space(Shape{kept}), 5).local();
    Tensor<double> sx(Shape{kept}), by(c.shape);
    kernels::sum_axes(x, c.axes, 1.0, 0.0, sx);
    kernels::broadcast_axes(y, c.axes, 1.0, 0.0, by);
    EXPECT_NEAR(kernels::dot(sx, y), kernels::dot(x, by), 1e-12);
    // With beta = 1 the repeat is added to what is there.
    Tensor<double> twice = by.clone();
    kernels::broadcast_axes(y, c.axes, 1.0, 1.0, twice);
    const auto a = by.to_vector(), b = twice.to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(b[i], 2 * a[i]);
  }
}

TEST(SumAxesKernel, BadAxesAreErrors) {
  Tensor<double> x(Shape{2, 3}), out(Shape{3});
  EXPECT_THROW(kernels::sum_axes(x, {1, 0}, 1.0, 0.0, out), Error);  // not increasing
  EXPECT_THROW(kernels::sum_axes(x, {2}, 1.0, 0.0, out), Error);     // out of range
  EXPECT_THROW(kernels::sum_axes(x, {1}, 1.0, 0.0, out), Error);     // out holds 2, not 3
  EXPECT_NO_THROW(kernels::sum_axes(x, {0}, 1.0, 0.0, out));
}

TEST(Reduction, SumAndMeanValuesAndSpaces) {
  for (const auto& c : axes_cases()) {
    for (const bool keepdim : {false, true}) {
      SCOPED_TRACE(c.shape.str() + (keepdim ? " keepdim" : ""));
      Var<double> x(random_tensor<double>(local_space(c.shape), 6), false);
      Tape tape;
      auto s = nn::sum(tape, x, c.axes, keepdim);
      auto m = nn::mean(tape, x, c.axes, keepdim);
      std::vector<std::int64_t> want_shape;
      std::int64_t count = 1;
      for (int a = 0; a < c.shape.rank(); ++a) {
        const bool reduced = std::find(c.axes.begin(), c.axes.end(), a) != c.axes.end();
        if (reduced) count *= c.shape[a];
        if (!reduced || keepdim) want_shape.push_back(reduced ? 1 : c.shape[a]);
      }
      if (want_shape.empty()) want_shape.push_back(1);
      EXPECT_EQ(s.space().global_shape(), Shape(want_shape));
      EXPECT_EQ(m.space(), s.space());
      const auto want = naive_sum(x.value().local().to_vector(), c.shape, c.axes);
      const auto sv = s.value().local().to_vector();
      const auto mv = m.value().local().to_vector();
      ASSERT_EQ(sv.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(sv[i], want[i], 1e-13);
        if (count > 0) {
          EXPECT_NEAR(mv[i], want[i] / static_cast<double>(count), 1e-14);
        }
      }
    }
  }
}

TEST(Reduction, NegativeAxesCountFromTheEnd) {
  Var<double> x(random_tensor<double>(local_space(Shape{2, 3, 4}), 7), false);
  Tape tape;
  EXPECT_EQ(nn::sum(tape, x, {-1}).value().local().to_vector(),
            nn::sum(tape, x, {2}).value().local().to_vector());
  EXPECT_EQ(nn::sum(tape, x, {-3, -1}, true).space(), nn::sum(tape, x, {0, 2}, true).space());
}

TEST(Reduction, GradientsMatchFiniteDifferences) {
  for (const auto& c : axes_cases()) {
    for (const bool keepdim : {false, true}) {
      SCOPED_TRACE(c.shape.str() + (keepdim ? " keepdim" : ""));
      Var<double> x(random_tensor<double>(local_space(c.shape), 8), true);
      Tape probe;
      const auto out_space = nn::sum(probe, x, c.axes, keepdim).space();
      probe.clear();
      const auto r = random_tensor<double>(out_space, 9);
      test::expect_gradients_match(
          [&](Tape& t) { return test::weighted_sum(t, nn::sum(t, x, c.axes, keepdim), r); }, {x});
      test::expect_gradients_match(
          [&](Tape& t) { return test::weighted_sum(t, nn::mean(t, x, c.axes, keepdim), r); }, {x});
    }
  }
}

TEST(Reduction, FullSumAndMeanToAScalar) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4, 2}), 10), true);
  Tape tape;
  auto s = nn::sum(tape, x);
  auto m = nn::mean(tape, x);
  EXPECT_EQ(s.space().global_shape(), Shape{1});
  double want = 0;
  for (double v : x.value().local().to_vector()) want += v;
  EXPECT_NEAR(s.value().local().to_vector()[0], want, 1e-13);
  EXPECT_NEAR(m.value().local().to_vector()[0], want / 24, 1e-14);
  tape.clear();
  const auto r = random_tensor<double>(s.space(), 11);
  test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, nn::sum(t, x), r); },
                               {x});
  test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, nn::mean(t, x), r); },
                               {x});
  // A chain: the mean of the row sums.
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::mean(t, nn::sum(t, x, {1})), r); }, {x});
}

TEST(Reduction, MeanOverNoEntriesIsNaN) {
  Var<double> x(DistTensor<double>(local_space(Shape{2, 0})), false);
  Tape tape;
  for (double v : nn::mean(tape, x, {1}).value().local().to_vector()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(nn::sum(tape, x, {1}).value().local().to_vector(), (std::vector<double>{0.0, 0.0}));
}

TEST(Reduction, FloatMatchesDouble) {
  test::expect_float_matches_double(
      local_space(Shape{5, 6, 3}),
      [](Tape& t, const Var<double>& x) {
        return nn::mean(t, x, {0, 2}, true);
      },
      [](Tape& t, const Var<float>& x) {
        return nn::mean(t, x, {0, 2}, true);
      },
      1e-6);
}

TEST(Reduction, BadAxesAreErrors) {
  Var<double> x(random_tensor<double>(local_space(Shape{2, 3, 4}), 12), true);
  Tape tape;
  EXPECT_THROW(nn::sum(tape, x, {}), Error);   // no axes
  EXPECT_THROW(nn::sum(tape, x, {3}), Error);  // out of range
  EXPECT_THROW(nn::mean(tape, x, {-4}), Error);
  EXPECT_THROW(nn::sum(tape, x, {1, 1}), Error);    // twice
  EXPECT_THROW(nn::mean(tape, x, {2, -1}), Error);  // twice, counted from both ends
  EXPECT_EQ(tape.size(), 0u);
}

}  // namespace
