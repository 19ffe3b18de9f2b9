// Interpolation (torch.nn.functional.interpolate, torch.nn.Upsample): small cases worked out by
// hand from torch's index rule; the kernels against plain loops written from torch's formulas over
// 1-3-D, every mode, align_corners both ways, size, scale factors (integer, fractional, per axis)
// and recompute_scale_factor; the backward kernel as the exact transpose of the forward; gradients
// against finite differences; float against double; and bad arguments an Error.
#include "distop/nn/interpolate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "distop/kernels/interpolate.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::TensorSpace;
using distop::Var;
using distop::kernels::InterpolateAxis;
using distop::kernels::InterpolateGeometry;
using distop::nn::InterpolateMode;
using distop::nn::InterpolateOptions;
namespace nn = distop::nn;
namespace test = distop::test;

Var<double> input(const Shape& s, const std::vector<double>& v, bool grad = false) {
  DistTensor<double> x(test::local_space(s));
  x.local().copy_from(Tensor<double>::from_vector(s, v));
  return Var<double>(x, grad);
}

// F.interpolate(x, options) through the functional form, as a flat vector.
std::vector<double> run(const Shape& s, const std::vector<double>& v, const InterpolateOptions& o) {
  Tape tape;
  return nn::interpolate(tape, input(s, v), o).value().local().to_vector();
}

std::vector<double> iota(std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return v;
}

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << ", entry " << i;
}

// --- torch's formulas, written out (ATen/native/UpSample.h and the CPU kernels) ------------------

// nearest_idx / nearest_exact_idx: float arithmetic throughout.
std::int64_t torch_nearest(std::int64_t o, std::int64_t n, std::int64_t m, double scale,
                           bool exact) {
  if (!exact && m == n) return o;
  if (!exact && m == 2 * n) return o >> 1;
  const float s = scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(n) / m;
  const float f =
      exact ? static_cast<float>((static_cast<double>(o) + 0.5) * s) : static_cast<float>(o) * s;
  return std::min(static_cast<std::int64_t>(std::floor(f)), n - 1);
}

// compute_source_index_and_lambda in double: the two inputs and their weights.
struct Linear {
  std::int64_t i0, i1;
  double l0, l1;
};
Linear torch_linear(std::int64_t o, std::int64_t n, std::int64_t m, double scale, bool align) {
  if (m == n) return {o, o, 1.0, 0.0};
  double r;
  if (align)
    r = m > 1 ? static_cast<double>(n - 1) / static_cast<double>(m - 1) : 0.0;
  else
    r = scale > 0 ? 1.0 / scale : static_cast<double>(n) / static_cast<double>(m);
  double src = align ? r * static_cast<double>(o) : r * (static_cast<double>(o) + 0.5) - 0.5;
  if (!align && src < 0) src = 0;
  const std::int64_t i0 = std::min(static_cast<std::int64_t>(src), n - 1);
  const std::int64_t i1 = i0 + (i0 < n - 1 ? 1 : 0);
  const double l1 = std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0);
  return {i0, i1, 1.0 - l1, l1};
}

// The whole interpolation by plain loops: every output, and for the linear modes every one of the
// 2^d corners with the product of its weights.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape,
                              const std::vector<InterpolateAxis>& axes, InterpolateMode mode,
                              bool align) {
  const int d = static_cast<int>(axes.size());
  const std::int64_t planes = shape[0] * shape[1];
  std::int64_t in_plane = 1, out_plane = 1;
  for (const auto& a : axes) {
    in_plane *= a.in;
    out_plane *= a.out;
  }
  const bool linear = distop::kernels::is_linear(mode);
  std::vector<double> y;
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t t = 0; t < out_plane; ++t) {
      std::vector<Linear> taps(static_cast<std::size_t>(d));
      std::int64_t rest = t;
      for (int a = d - 1; a >= 0; --a) {
        const auto& ax = axes[static_cast<std::size_t>(a)];
        const std::int64_t o = rest % ax.out;
        rest /= ax.out;
        if (linear) {
          taps[static_cast<std::size_t>(a)] = torch_linear(o, ax.in, ax.out, ax.scale, align);
        } else {
          const std::int64_t i =
              torch_nearest(o, ax.in, ax.out, ax.scale, mode == InterpolateMode::nearest_exact);
          taps[static_cast<std::size_t>(a)] = {i, i, 1.0, 0.0};
        }
      }
      double sum = 0;
      for (int corner = 0; corner < (linear ? 1 << d : 1); ++corner) {
        double w = 1;
        std::int64_t flat = 0;
        for (int a = 0; a < d; ++a) {
          const Linear& l = taps[static_cast<std::size_t>(a)];
          const bool second = (corner >> (d - 1 - a)) & 1;
          w *= second ? l.l1 : l.l0;
          flat = flat * axes[static_cast<std::size_t>(a)].in + (second ? l.i1 : l.i0);
        }
        sum += w * x[static_cast<std::size_t>(p * in_plane + flat)];
      }
      y.push_back(sum);
    }
  return y;
}

struct Case {
  std::string name;
  Shape input;
  InterpolateOptions options;
};

std::vector<Case> cases() {
  using M = InterpolateMode;
  return {
      {"1-D nearest x2", Shape{2, 2, 5}, {.scale_factor = 2}},
      {"1-D nearest x1.5", Shape{1, 2, 5}, {.scale_factor = 1.5}},
      {"1-D nearest x0.5", Shape{1, 2, 7}, {.scale_factor = 0.5}},
      {"1-D nearest size 3", Shape{1, 1, 7}, {.size = 3}},
      {"1-D nearest x2.1 (m = 2n)", Shape{1, 1, 5}, {.scale_factor = 2.1}},
      {"1-D nearest x1.1 (m = n)", Shape{1, 1, 5}, {.scale_factor = 1.1}},
      {"1-D nearest-exact x1.5", Shape{1, 2, 5}, {.scale_factor = 1.5, .mode = M::nearest_exact}},
      {"1-D nearest-exact size 4", Shape{1, 1, 9}, {.size = 4, .mode = M::nearest_exact}},
      {"1-D linear x2", Shape{2, 1, 4}, {.scale_factor = 2, .mode = M::linear}},
      {"1-D linear x1.5 aligned",
       Shape{1, 2, 5},
       {.scale_factor = 1.5, .mode = M::linear, .align_corners = true}},
      {"1-D linear x0.5", Shape{1, 1, 9}, {.scale_factor = 0.5, .mode = M::linear}},
      {"1-D linear x1.5 recomputed",
       Shape{1, 1, 5},
       {.scale_factor = 1.5, .mode = M::linear, .recompute_scale_factor = true}},
      {"1-D linear size 1", Shape{1, 1, 4}, {.size = 1, .mode = M::linear}},
      {"1-D linear size 1 aligned",
       Shape{1, 1, 4},
       {.size = 1, .mode = M::linear, .align_corners = true}},
      {"2-D nearest x(2, 1.5)", Shape{1, 2, 3, 4}, {.scale_factor = {2, 1.5}}},
      {"2-D nearest-exact size (5, 2)",
       Shape{2, 1, 3, 5},
       {.size = {5, 2}, .mode = M::nearest_exact}},
      {"2-D bilinear x2", Shape{1, 2, 3, 4}, {.scale_factor = 2, .mode = M::bilinear}},
      {"2-D bilinear size (5, 3) aligned",
       Shape{1, 1, 4, 6},
       {.size = {5, 3}, .mode = M::bilinear, .align_corners = true}},
      {"2-D bilinear x(0.5, 1.75)",
       Shape{1, 1, 6, 4},
       {.scale_factor = {0.5, 1.75}, .mode = M::bilinear}},
      {"3-D nearest x2", Shape{1, 1, 2, 3, 2}, {.scale_factor = 2}},
      {"3-D trilinear x(1.5, 2, 0.5)",
       Shape{1, 2, 3, 2, 4},
       {.scale_factor = {1.5, 2, 0.5}, .mode = M::trilinear}},
      {"3-D trilinear size (3, 4, 2) aligned",
       Shape{1, 1, 2, 3, 4},
       {.size = {3, 4, 2}, .mode = M::trilinear, .align_corners = true}},
  };
}

Shape spatial_of(const Shape& s) {
  return Shape(std::vector<std::int64_t>(s.begin() + 2, s.end()));
}

// Pseudo-random values in [-1, 1) (not a linear function of the index, which the linear modes
// would reproduce whatever the weights).
std::vector<double> values(std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = std::sin(1.7 * static_cast<double>(i) + 0.3);
  return v;
}

}  // namespace

// --- cases worked out by hand from torch's documented rule ---------------------------------------

TEST(Interpolate, LinearTwoToFourByHand) {
  using M = InterpolateMode;
  // align_corners=False: source positions max(0.5 (o + 0.5) - 0.5, 0) = 0, 0.25, 0.75, 1.25
  // (the last clamped to the last input): torch gives [1, 1.25, 1.75, 2].
  expect_all_near(run(Shape{1, 1, 2}, {1, 2}, {.size = 4, .mode = M::linear}), {1, 1.25, 1.75, 2},
                  1e-15, "align_corners false");
  // align_corners=True: positions o (2 - 1) / (4 - 1) = 0, 1/3, 2/3, 1.
  expect_all_near(
      run(Shape{1, 1, 2}, {1, 2}, {.size = 4, .mode = M::linear, .align_corners = true}),
      {1, 4.0 / 3, 5.0 / 3, 2}, 1e-15, "align_corners true");
  // scale_factor=2 without recompute: 1 / scale = 0.5 = n / m, the same numbers.
  expect_all_near(run(Shape{1, 1, 2}, {1, 2}, {.scale_factor = 2, .mode = M::linear}),
                  {1, 1.25, 1.75, 2}, 1e-15, "scale factor 2");
}

TEST(Interpolate, ScaleFactorUsesItsReciprocalNotInOverOut) {
  using M = InterpolateMode;
  // x = [0, 1, 2, 3, 4]: a linear interpolation of the identity is the clamped source position.
  // scale 1.5: m = floor(7.5) = 7 and the position is (o + 0.5) / 1.5 - 0.5, clamped to [0, 4].
  expect_all_near(run(Shape{1, 1, 5}, iota(5), {.scale_factor = 1.5, .mode = M::linear}),
                  {0, 0.5, 7.0 / 6, 11.0 / 6, 2.5, 19.0 / 6, 23.0 / 6}, 1e-14, "scale 1.5");
  // size 7 (or recompute_scale_factor): the position is (o + 0.5) 5/7 - 0.5; the last is 4.14..,
  // past the last input, which it takes.
  const std::vector<double> by_size{0, 4.0 / 7, 9.0 / 7, 2, 19.0 / 7, 24.0 / 7, 4};
  expect_all_near(run(Shape{1, 1, 5}, iota(5), {.size = 7, .mode = M::linear}), by_size, 1e-14,
                  "size 7");
  expect_all_near(run(Shape{1, 1, 5}, iota(5),
                      {.scale_factor = 1.5, .mode = M::linear, .recompute_scale_factor = true}),
                  by_size, 1e-14, "recomputed");
}

TEST(Interpolate, NearestByHand) {
  using M = InterpolateMode;
  // scale 1.5 over 4: m = 6, index floorf(o * 0.6666667f) = 0, 0, 1, 2 (2.0000001), 2, 3.
  EXPECT_EQ(run(Shape{1, 1, 4}, {10, 11, 12, 13}, {.scale_factor = 1.5}),
            (std::vector<double>{10, 10, 11, 12, 12, 13}));
  // scale 0.5 over 6: m = 3, index 2 o.
  EXPECT_EQ(run(Shape{1, 1, 6}, iota(6), {.scale_factor = 0.5}), (std::vector<double>{0, 2, 4}));
  // nearest-exact, 4 -> 6: floorf((o + 0.5) 2/3) = 0, 1, 1, 2, 3, 3 (nearest: 0, 0, 1, 2, 2, 3).
  EXPECT_EQ(run(Shape{1, 1, 4}, iota(4), {.size = 6, .mode = M::nearest_exact}),
            (std::vector<double>{0, 1, 1, 2, 3, 3}));
  // nearest-exact, scale 0.5 over 6: floorf((o + 0.5) 2) = 1, 3, 5.
  EXPECT_EQ(run(Shape{1, 1, 6}, iota(6), {.scale_factor = 0.5, .mode = M::nearest_exact}),
            (std::vector<double>{1, 3, 5}));
  // torch's CPU special case: scale 2.1 over 5 gives m = 10 = 2 n, so the index is o >> 1 (the
  // general rule, floorf(o / 2.1), would give 0 for o = 2).
  EXPECT_EQ(run(Shape{1, 1, 5}, iota(5), {.scale_factor = 2.1}),
            (std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}));
  // torch.nn.Upsample's default mode is nearest; 2-D, per-axis scales (2, 1).
  nn::Upsample<double> up({.scale_factor = {2, 1}});
  Tape tape;
  EXPECT_EQ(up.forward(tape, input(Shape{1, 1, 2, 2}, {1, 2, 3, 4})).value().local().to_vector(),
            (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4}));
}

TEST(Interpolate, LinearModesReproduceLinearAndBilinearFunctions) {
  using M = InterpolateMode;
  // Trilinear interpolation of f(i, j, k) = 1 + i + 2 j + 4 k, 2 x 2 x 2 -> 3 x 3 x 3 with
  // align_corners: positions o / 2 on every axis, so y = 1 + (o0 + 2 o1 + 4 o2) / 2.
  std::vector<double> f;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) f.push_back(1 + i + 2 * j + 4 * k);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) want.push_back(1 + (i + 2 * j + 4 * k) / 2.0);
  expect_all_near(
      run(Shape{1, 1, 2, 2, 2}, f, {.size = 3, .mode = M::trilinear, .align_corners = true}), want,
      1e-14, "trilinear");
  // Bilinear interpolation of f(i, j) = i j, 3 x 3 -> 5 x 5 aligned: positions o / 2.
  std::vector<double> g, gw;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) g.push_back(i * j);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) gw.push_back(i * j / 4.0);
  expect_all_near(
      run(Shape{1, 1, 3, 3}, g, {.size = 5, .mode = M::bilinear, .align_corners = true}), gw, 1e-14,
      "bilinear");
}

// --- against the plain loops
// -----------------------------------------------------------------------

TEST(Interpolate, MatchesTorchsFormulasInPlainLoops) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto axes = nn::interpolate_axes(spatial_of(c.input), c.options);
    const auto x = values(c.input.numel());
    const auto want =
        reference(x, c.input, axes, c.options.mode, c.options.align_corners.value_or(false));
    const auto got = run(c.input, x, c.options);
    if (distop::kernels::is_linear(c.options.mode))
      expect_all_near(got, want, 1e-14, c.name);
    else
      EXPECT_EQ(got, want);
    nn::Interpolate<double> layer(c.options);
    Tape tape;
    auto y = layer.forward(tape, input(c.input, x));
    EXPECT_EQ(y.space(), layer.output_space(test::local_space(c.input)));
    EXPECT_EQ(y.value().local().to_vector(), got);
  }
}

// The backward kernel is the transpose of the forward's matrix, read off column by column from
// unit inputs; with beta it adds to what dx held.
TEST(Interpolate, BackwardIsTheTransposeOfTheForward) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto g =
        InterpolateGeometry::whole(c.options.mode, c.options.align_corners.value_or(false),
                                   nn::interpolate_axes(spatial_of(c.input), c.options));
    std::vector<std::int64_t> in_e{1, 1}, out_e{1, 1};
    in_e.insert(in_e.end(), g.in.begin(), g.in.end());
    out_e.insert(out_e.end(), g.out.begin(), g.out.end());
    const Shape in(in_e), out(out_e);
    const std::int64_t n = in.numel(), m = out.numel();
    std::vector<double> matrix(static_cast<std::size_t>(n * m));  // [m, n]
    Tensor<double> y(out);
    for (std::int64_t j = 0; j < n; ++j) {
      std::vector<double> e(static_cast<std::size_t>(n), 0.0);
      e[static_cast<std::size_t>(j)] = 1;
      distop::kernels::interpolate_forward(Tensor<double>::from_vector(in, e), y, g);
      const auto col = y.to_vector();
      for (std::int64_t i = 0; i < m; ++i)
        matrix[static_cast<std::size_t>(i * n + j)] = col[static_cast<std::size_t>(i)];
    }
    const auto dy = values(m);
    const auto held = values(n + 3);
    Tensor<double> dx =
        Tensor<double>::from_vector(in, std::vector<double>(held.begin() + 3, held.end()));
    distop::kernels::interpolate_backward(Tensor<double>::from_vector(out, dy), 0.5, dx, g);
    const auto got = dx.to_vector();
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0.5 * held[static_cast<std::size_t>(j + 3)];
      for (std::int64_t i = 0; i < m; ++i)
        want += matrix[static_cast<std::size_t>(i * n + j)] * dy[static_cast<std::size_t>(i)];
      EXPECT_NEAR(got[static_cast<std::size_t>(j)], want, 1e-14) << "input " << j;
    }
  }
}

TEST(Interpolate, GradientMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Var<double> x = input(c.input, values(c.input.numel()), true);
    nn::Interpolate<double> layer(c.options);
    const auto r = test::random_tensor<double>(layer.output_space(x.space()), 5);
    test::expect_gradients_match(
        [&](Tape& tape) { return test::weighted_sum(tape, layer.forward(tape, x), r); }, {x});
  }
}

TEST(Interpolate, FloatMatchesDouble) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const nn::Interpolate<double> ld(c.options);
    const nn::Interpolate<float> lf(c.options);
    test::expect_float_matches_double(
        test::local_space(c.input), [&](Tape& t, const Var<double>& x) { return ld.forward(t, x); },
        [&](Tape& t, const Var<float>& x) { return lf.forward(t, x); }, 1e-6);
  }
}

// A rank's share of the outputs computed from a window of the input (what the distributed layer
// runs) equals the same entries of the whole interpolation.
TEST(Interpolate, AnOffsetBlockGivesTheWholeInterpolationsEntries) {
  const Shape shape{1, 1, 9};
  const auto x = values(9);
  for (InterpolateMode mode : {InterpolateMode::nearest, InterpolateMode::linear}) {
    const InterpolateOptions o{.scale_factor = 1.5, .mode = mode};
    const auto whole = run(shape, x, o);  // 13 outputs
    auto g = InterpolateGeometry::whole(mode, false, nn::interpolate_axes(Shape{9}, o));
    // Outputs [5, 9) read inputs 3..6 (linear: (o + 0.5) / 1.5 - 0.5 from 3.17 to 5.17, and the
    // right neighbour of 5); give it inputs [2, 8).
    g.in_begin = {2};
    g.out_begin = {5};
    g.in = Shape{6};
    g.out = Shape{4};
    Tensor<double> y(Shape{1, 1, 4});
    distop::kernels::interpolate_forward(
        Tensor<double>::from_vector(Shape{1, 1, 6},
                                    std::vector<double>(x.begin() + 2, x.begin() + 8)),
        y, g);
    EXPECT_EQ(y.to_vector(), std::vector<double>(whole.begin() + 5, whole.begin() + 9));
    // An array that misses an input an output reads is an Error.
    g.in_begin = {5};
    g.in = Shape{3};
    EXPECT_THROW(distop::kernels::interpolate_forward(Tensor<double>(Shape{1, 1, 3}), y, g),
                 distop::Error);
  }
}

// --- bad arguments -------------------------------------------------------------------------------

TEST(Interpolate, BadArgumentsAreErrors) {
  using M = InterpolateMode;
  using distop::Error;
  const Shape s1{1, 1, 4}, s2{1, 1, 4, 4}, s3{1, 1, 2, 2, 2};
  auto fails = [](const Shape& s, const InterpolateOptions& o) {
    EXPECT_THROW(run(s, std::vector<double>(static_cast<std::size_t>(s.numel()), 1.0), o), Error);
  };
  // The mode must match the number of spatial axes, as torch's.
  fails(s2, {.scale_factor = 2, .mode = M::linear});
  fails(s1, {.scale_factor = 2, .mode = M::bilinear});
  fails(s2, {.scale_factor = 2, .mode = M::trilinear});
  fails(s3, {.scale_factor = 2, .mode = M::bilinear});
  // align_corners with a nearest mode, true or false.
  EXPECT_THROW(nn::Interpolate<double>({.scale_factor = 2, .align_corners = false}), Error);
  EXPECT_THROW(
      nn::Interpolate<double>({.scale_factor = 2, .mode = M::nearest_exact, .align_corners = true}),
      Error);
  // Neither or both of size and scale_factor.
  EXPECT_THROW(nn::Interpolate<double>({}), Error);
  EXPECT_THROW(nn::Interpolate<double>({.size = 4, .scale_factor = 2}), Error);
  EXPECT_THROW(nn::Upsample<float>({.mode = M::linear}), Error);
  // Zero and negative sizes and scales, and a scale that leaves no output.
  EXPECT_THROW(nn::Interpolate<double>({.size = 0}), Error);
  EXPECT_THROW(nn::Interpolate<double>({.size = {4, -1}}), Error);
  EXPECT_THROW(nn::Interpolate<double>({.scale_factor = 0.0}), Error);
  EXPECT_THROW(nn::Interpolate<double>({.scale_factor = -2}), Error);
  EXPECT_THROW(nn::Interpolate<double>({.scale_factor = std::numeric_limits<double>::quiet_NaN()}),
               Error);
  fails(s1, {.scale_factor = 0.2});  // floor(0.8) = 0 outputs
  // Counts other than 1 or d, and more than 3.
  fails(s3, {.size = {2, 2}});
  fails(s1, {.scale_factor = {2, 2}});
  EXPECT_THROW(nn::Interpolate<double>({.size = {2, 2, 2, 2}}), Error);
  // recompute_scale_factor with a size.
  EXPECT_THROW(nn::Interpolate<double>({.size = 2, .recompute_scale_factor = true}), Error);
  // Inputs of rank 3 to 5 only.
  fails(Shape{1, 4}, {.scale_factor = 2});
  fails(Shape{1, 1, 2, 2, 2, 2}, {.scale_factor = 2});
  // Mode names: torch's, and only the implemented ones.
  EXPECT_EQ(nn::parse_interpolate_mode("nearest-exact"), M::nearest_exact);
  EXPECT_EQ(nn::parse_interpolate_mode("trilinear"), M::trilinear);
  EXPECT_THROW(nn::parse_interpolate_mode("bicubic"), Error);
  EXPECT_THROW(nn::parse_interpolate_mode("Linear"), Error);
  // The kernel's own checks: mismatched shapes.
  const auto g = InterpolateGeometry::whole(M::nearest, false, {{4, 8, 0}});
  Tensor<double> y(Shape{1, 1, 7});
  EXPECT_THROW(distop::kernels::interpolate_forward(Tensor<double>(s1), y, g), Error);
}
