// nn::ConvTranspose (torch's ConvTranspose1d/2d/3d) and nn::conv_transpose: the output, input,
// weight and bias gradients against plain loops of torch's definition at 1-3-D (stride, padding,
// output_padding, dilation) under every host convolution method; gradient checks in double; the
// transposed convolution as the adjoint of nn::Conv; torch's parameter names, layout and
// initialisation bound; bad options and inputs.
#include "distop/nn/conv_transpose.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "distop/kernels/conv.hpp"
#include "distop/nn/conv.hpp"
#include "distop/ops/halo.hpp"
#include "gradcheck.hpp"

namespace {

using namespace distop;
using I = std::vector<std::int64_t>;

struct Case {
  const char* name;
  I in;  // input spatial extents
  I kernel;
  nn::ConvTransposeOptions options;
  std::int64_t n, c, o;
};

std::vector<Case> cases() {
  return {
      {"1d_s2_p1_op1", {5}, {3}, {.stride = 2, .padding = 1, .output_padding = 1}, 2, 3, 2},
      {"1d_s1_p1", {7}, {3}, {.padding = 1}, 2, 2, 3},
      {"1d_s3_d2_op2", {4}, {2}, {.stride = 3, .output_padding = 2, .dilation = 2}, 1, 2, 2},
      {"1d_op_below_dilation",
       {4},
       {3},
       {.stride = 1, .output_padding = 1, .dilation = 2},
       2,
       1,
       2},
      {"2d_s2_p1_op1_d1x2",
       {4, 3},
       {3, 2},
       {.stride = 2, .padding = {1, 0}, .output_padding = 1, .dilation = {1, 2}},
       2,
       3,
       2},
      {"2d_s1_k3_p1", {5, 4}, {3}, {.padding = 1, .bias = false}, 2, 2, 3},
      {"2d_s2x1_p2", {3, 5}, {5, 3}, {.stride = {2, 1}, .padding = {2, 1}}, 1, 2, 2},
      {"3d_s2_p1_op1",
       {3, 2, 3},
       {3, 2, 2},
       {.stride = 2, .padding = {1, 0, 1}, .output_padding = {1, 0, 1}},
       2,
       2,
       2},
  };
}

std::int64_t pick(const nn::AxisValues& v, std::size_t a) {
  return v.values.size() == 1 ? v.values[0] : v.values[a];
}

// torch's output extents: (in - 1) s - 2 p + d (k - 1) + output_padding + 1.
I out_extents(const Case& cs) {
  I out;
  for (std::size_t a = 0; a < cs.in.size(); ++a) {
    const std::int64_t k = cs.kernel.size() == 1 ? cs.kernel[0] : cs.kernel[a];
    out.push_back((cs.in[a] - 1) * pick(cs.options.stride, a) - 2 * pick(cs.options.padding, a) +
                  pick(cs.options.dilation, a) * (k - 1) + pick(cs.options.output_padding, a) + 1);
  }
  return out;
}

Shape lead(std::int64_t a, std::int64_t b, const I& s) {
  I e{a, b};
  e.insert(e.end(), s.begin(), s.end());
  return Shape(e);
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// torch's definition by plain loops: y[n, o, t] = b[o] + sum over c, i, j with t = i s - p + j d
// (on every axis) of x[n, c, i] w[c, o, j]; and its gradients for an output gradient dy.
Reference reference(const Case& cs, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& b, const std::vector<double>& dy) {
  const std::size_t d = cs.in.size();
  const I out = out_extents(cs);
  I k(d);
  std::int64_t in_n = 1, out_n = 1, taps = 1;
  for (std::size_t a = 0; a < d; ++a) {
    k[a] = cs.kernel.size() == 1 ? cs.kernel[0] : cs.kernel[a];
    in_n *= cs.in[a];
    out_n *= out[a];
    taps *= k[a];
  }
  Reference r;
  r.y.assign(static_cast<std::size_t>(cs.n * cs.o * out_n), 0.0);
  r.dx.assign(static_cast<std::size_t>(cs.n * cs.c * in_n), 0.0);
  r.dw.assign(static_cast<std::size_t>(cs.c * cs.o * taps), 0.0);
  r.db.assign(static_cast<std::size_t>(cs.o), 0.0);
  for (std::int64_t n = 0; n < cs.n; ++n)
    for (std::int64_t o = 0; o < cs.o; ++o)
      for (std::int64_t t = 0; t < out_n; ++t) {
        const auto yi = static_cast<std::size_t>((n * cs.o + o) * out_n + t);
        if (!b.empty()) r.y[yi] = b[static_cast<std::size_t>(o)];
        r.db[static_cast<std::size_t>(o)] += dy[yi];
      }
  for (std::int64_t n = 0; n < cs.n; ++n)
    for (std::int64_t c = 0; c < cs.c; ++c)
      for (std::int64_t o = 0; o < cs.o; ++o)
        for (std::int64_t i = 0; i < in_n; ++i)
          for (std::int64_t j = 0; j < taps; ++j) {
            // Unflatten i and j (row-major) and find the output index t.
            std::int64_t ir = i, jr = j, t = 0, t_stride = 1;
            bool inside = true;
            for (std::size_t a = d; a-- > 0;) {
              const std::int64_t ia = ir % cs.in[a], ja = jr % k[a];
              ir /= cs.in[a];
              jr /= k[a];
              const std::int64_t ta = ia * pick(cs.options.stride, a) -
                                      pick(cs.options.padding, a) +
                                      ja * pick(cs.options.dilation, a);
              inside = inside && ta >= 0 && ta < out[a];
              t += ta * t_stride;
              t_stride *= out[a];
            }
            if (!inside) continue;
            const auto xi = static_cast<std::size_t>((n * cs.c + c) * in_n + i);
            const auto wi = static_cast<std::size_t>((c * cs.o + o) * taps + j);
            const auto yi = static_cast<std::size_t>((n * cs.o + o) * out_n + t);
            r.y[yi] += x[xi] * w[wi];
            r.dx[xi] += w[wi] * dy[yi];
            r.dw[wi] += x[xi] * dy[yi];
          }
  return r;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i])))
        << what << " entry " << i;
}

// Sets the process-wide convolution method for a scope.
class MethodScope {
 public:
  explicit MethodScope(kernels::ConvMethod m) : saved_(kernels::conv_method()) {
    kernels::set_conv_method(m);
  }
  ~MethodScope() { kernels::set_conv_method(saved_); }
  MethodScope(const MethodScope&) = delete;
  MethodScope& operator=(const MethodScope&) = delete;

 private:
  kernels::ConvMethod saved_;
};

nn::ConvTransposeOptions with_seed(nn::ConvTransposeOptions o, std::uint64_t seed) {
  o.seed = seed;
  return o;
}

Var<double> input(const Shape& shape, std::uint64_t seed) {
  return Var<double>(test::random_tensor<double>(test::local_space(shape), seed), true);
}

TEST(ConvTranspose, MatchesTorchsDefinitionInValuesAndGradients) {
  std::uint64_t seed = 1;
  for (const auto method : {kernels::ConvMethod::automatic, kernels::ConvMethod::im2col,
                            kernels::ConvMethod::bands, kernels::ConvMethod::direct}) {
    const MethodScope scope(method);
    SCOPED_TRACE(static_cast<int>(method));
    for (const Case& cs : cases()) {
      SCOPED_TRACE(cs.name);
      const int dims = static_cast<int>(cs.in.size());
      nn::ConvTranspose<double> layer(dims, cs.c, cs.o, cs.kernel, with_seed(cs.options, seed++));
      Var<double> x = input(lead(cs.n, cs.c, cs.in), seed++);
      Tape tape;
      Var<double> y = layer.forward(tape, x);
      ASSERT_EQ(y.space().global_shape(), lead(cs.n, cs.o, out_extents(cs)));
      const auto dy = test::random_tensor<double>(y.space(), seed++);
      backward(tape, y, dy);
      const std::vector<double> b =
          cs.options.bias ? layer.bias().value().local().to_vector() : std::vector<double>();
      const Reference ref =
          reference(cs, x.value().local().to_vector(), layer.weight().value().local().to_vector(),
                    b, dy.local().to_vector());
      expect_close(y.value().local().to_vector(), ref.y, "y");
      expect_close(x.grad().local().to_vector(), ref.dx, "dx");
      expect_close(layer.weight().grad().local().to_vector(), ref.dw, "dw");
      if (cs.options.bias) expect_close(layer.bias().grad().local().to_vector(), ref.db, "db");
      // A second backward pass adds to the gradients (beta 1 in the kernels).
      Tape again;
      Var<double> y2 = layer.forward(again, x);
      backward(again, y2, dy);
      auto twice = ref.dx;
      for (auto& v : twice) v *= 2;
      expect_close(x.grad().local().to_vector(), twice, "dx accumulated");
      twice = ref.dw;
      for (auto& v : twice) v *= 2;
      expect_close(layer.weight().grad().local().to_vector(), twice, "dw accumulated");
    }
  }
}

TEST(ConvTranspose, GradientsMatchFiniteDifferences) {
  for (const std::size_t which : {std::size_t{0}, std::size_t{4}, std::size_t{7}}) {
    const Case cs = cases()[which];
    SCOPED_TRACE(cs.name);
    nn::ConvTranspose<double> layer(static_cast<int>(cs.in.size()), cs.c, cs.o, cs.kernel,
                                    with_seed(cs.options, 9));
    Var<double> x = input(lead(cs.n, cs.c, cs.in), 10);
    Tape probe;
    const auto r = test::random_tensor<double>(layer.forward(probe, x).space(), 11);
    test::expect_gradients_match(
        [&](Tape& t) { return test::weighted_sum(t, layer.forward(t, x), r); },
        {x, layer.weight(), layer.bias()}, 1e-6, 1e-7);
  }
}

// <conv_transpose(x), y> = <x, conv(y)> for nn::Conv holding the same weight: the convolution
// from C_out to C_in channels, whose weight [C_in, C_out, k..] is the transposed one's.
TEST(ConvTranspose, IsTheAdjointOfTheConvolution) {
  for (const Case& cs : cases()) {
    bool below_stride = true;  // then conv's output extent is the transposed input extent
    for (std::size_t a = 0; a < cs.in.size(); ++a)
      below_stride =
          below_stride && pick(cs.options.output_padding, a) < pick(cs.options.stride, a);
    if (!below_stride) continue;
    SCOPED_TRACE(cs.name);
    const int dims = static_cast<int>(cs.in.size());
    nn::ConvTransposeOptions to = cs.options;
    to.bias = false;
    nn::ConvTranspose<double> up(dims, cs.c, cs.o, cs.kernel, with_seed(to, 3));
    nn::Conv<double> down(dims, cs.o, cs.c, cs.kernel,
                          {.stride = cs.options.stride,
                           .padding = cs.options.padding,
                           .dilation = cs.options.dilation,
                           .bias = false});
    down.weight().value().local().copy_from(up.weight().value().local());
    Var<double> x = input(lead(cs.n, cs.c, cs.in), 4);
    Var<double> y = input(lead(cs.n, cs.o, out_extents(cs)), 5);
    Tape tape;
    const auto ux = up.forward(tape, x).value().local().to_vector();
    const auto dy = down.forward(tape, y).value().local().to_vector();
    const auto xv = x.value().local().to_vector(), yv = y.value().local().to_vector();
    ASSERT_EQ(ux.size(), yv.size());
    ASSERT_EQ(dy.size(), xv.size());
    double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < ux.size(); ++i) lhs += ux[i] * yv[i];
    for (std::size_t i = 0; i < dy.size(); ++i) rhs += xv[i] * dy[i];
    EXPECT_NEAR(lhs, rhs, 1e-12 * std::max(1.0, std::abs(lhs)));
    EXPECT_GT(std::abs(lhs), 1e-3);  // not trivially zero
  }
}

TEST(ConvTranspose, TorchsParametersAndInitialisation) {
  // ConvTranspose2d(3, 5, (2, 4)): weight [3, 5, 2, 4], bias [5], both uniform in +-1/sqrt(5 * 8)
  // (torch's fan_in of a transposed weight: its second extent times the kernel).
  nn::ConvTranspose<double> layer(2, 3, 5, {2, 4}, {.seed = 7});
  const auto sd = layer.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd.at("weight").shape, (Shape{3, 5, 2, 4}));
  EXPECT_EQ(sd.at("bias").shape, (Shape{5}));
  const double bound = 1.0 / std::sqrt(40.0);
  double largest = 0;
  for (const auto& name : {"weight", "bias"})
    for (double v : std::get<0>(sd.at(name).values)) {
      EXPECT_LE(std::abs(v), bound) << name;
      largest = std::max(largest, std::abs(v));
    }
  EXPECT_GT(largest, 0.8 * bound);  // the whole range is used, not C k's narrower one
  // The same seed gives the same values; another seed other values.
  nn::ConvTranspose<double> same(2, 3, 5, {2, 4}, {.seed = 7});
  nn::ConvTranspose<double> other(2, 3, 5, {2, 4}, {.seed = 8});
  EXPECT_EQ(std::get<0>(same.state_dict().at("weight").values),
            std::get<0>(sd.at("weight").values));
  EXPECT_NE(std::get<0>(other.state_dict().at("weight").values),
            std::get<0>(sd.at("weight").values));
  nn::ConvTranspose<double> no_bias(1, 2, 2, 3, {.bias = false});
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_THROW(no_bias.bias(), Error);
}

TEST(ConvTranspose, FloatMatchesDouble) {
  const Case cs = cases()[4];
  nn::ConvTranspose<float> lf(2, cs.c, cs.o, cs.kernel, with_seed(cs.options, 2));
  nn::ConvTranspose<double> ld(2, cs.c, cs.o, cs.kernel, with_seed(cs.options, 2));
  ld.weight().value().local().copy_from(test::widened(lf.weight().value()).local());
  ld.bias().value().local().copy_from(test::widened(lf.bias().value()).local());
  test::expect_float_matches_double(
      test::local_space(lead(cs.n, cs.c, cs.in)),
      [&](Tape& t, const Var<double>& x) { return ld.forward(t, x); },
      [&](Tape& t, const Var<float>& x) { return lf.forward(t, x); }, 1e-5);
}

TEST(ConvTranspose, OutputExtentsAndHaloRule) {
  // ConvTranspose1d(k 3, s 2, p 1, output_padding 1) doubles the extent.
  EXPECT_EQ(transposed_output_extent(7, {3, 2, 1, 1}, 1), 14);
  EXPECT_EQ(transposed_output_extent(4, {2, 3, 0, 2}, 2), 14);  // 9 + 2 + 2 + 1
  // 2 parts over 7 inputs (blocks [0, 4), [4, 7)) and 14 outputs ([0, 7), [7, 14)): output t
  // receives from i with t = 2 i - 1 + j, j < 3, so [0, 7) needs inputs [0, 3] (its own block)
  // and [7, 14) needs [3, 6] (input 3 reaches output 7): a left halo of 1.
  const auto h = transposed_halo_widths(7, 2, {3, 2, 1, 1}, 1);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].out_end, 7);
  EXPECT_EQ(h[0].need_begin, 0);
  EXPECT_EQ(h[0].need_end, 4);
  EXPECT_EQ(h[0].right, 0);
  EXPECT_EQ(h[1].need_begin, 3);
  EXPECT_EQ(h[1].need_end, 7);
  EXPECT_EQ(h[1].left, 1);
  // A kernel of 5 with padding 0 (18 outputs: [0, 9), [9, 18)): [9, 18) needs inputs from
  // ceil((9 - 4) / 2) = 3 and [0, 9) up to floor(8 / 2) = 4, a halo of 1 each way.
  const auto wide = transposed_halo_widths(7, 2, {5, 2, 0, 1}, 1);
  EXPECT_EQ(wide[1].out_begin, 9);
  EXPECT_EQ(wide[1].need_begin, 3);
  EXPECT_EQ(wide[1].left, 1);
  EXPECT_EQ(wide[0].need_end, 5);
  EXPECT_EQ(wide[0].right, 1);
  // Kernel 1, stride 3, padding 1 over 2 inputs: outputs t = 3 i - 1 are -1 and 2, both outside
  // the 2 outputs, which receive nothing (the bias only): each part needs nothing, both of its
  // widths are surplus.
  const auto sparse = transposed_halo_widths(2, 2, {1, 3, 1, 1}, 0);
  ASSERT_EQ(sparse.size(), 2u);
  for (const PartHalo& p : sparse) {
    EXPECT_EQ(p.need_begin, p.need_end);
    EXPECT_LE(p.left, 0);
    EXPECT_LE(p.right, 0);
    EXPECT_EQ(p.own_end - p.own_begin + p.left + p.right, 0);
  }
  // Every output of the plain loops' cases comes from the needed inputs: each need range holds
  // every input that reaches the part's outputs, and nothing outside [0, n).
  for (std::int64_t n : {5, 8, 13})
    for (std::int64_t parts : {1, 2, 3})
      for (const ConvWindow w : {ConvWindow{3, 2, 1, 1}, ConvWindow{4, 3, 2, 1},
                                 ConvWindow{2, 1, 0, 3}, ConvWindow{1, 4, 0, 1}}) {
        SCOPED_TRACE(n * 100 + parts * 10 + w.kernel);
        const auto hs = transposed_halo_widths(n, parts, w, 0);
        for (const PartHalo& p : hs)
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < w.kernel; ++j) {
              const std::int64_t t = i * w.stride - w.padding + j * w.dilation;
              if (t >= p.out_begin && t < p.out_end) {
                EXPECT_GE(i, p.need_begin);
                EXPECT_LT(i, p.need_end);
              }
            }
      }
  // Inputs beyond the adjacent neighbour: a kernel of 9 over parts of 2 inputs.
  EXPECT_THROW(transposed_halo_widths(6, 3, {9, 1, 0, 1}, 0), Error);
  EXPECT_THROW(transposed_output_extent(4, {3, 2, 0, 1}, 2), Error);  // output padding >= s, d
}

TEST(ConvTranspose, BadOptionsAndInputsAreErrors) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // output_padding must be smaller than the stride or the dilation, and not negative.
  EXPECT_NE(message([] {
              nn::ConvTranspose<double>(2, 2, 2, 3, {.stride = 2, .output_padding = 2});
            }).find("output_padding"),
            std::string::npos);
  EXPECT_THROW(nn::ConvTranspose<double>(1, 2, 2, 3, {.output_padding = 1}), Error);
  EXPECT_NO_THROW(nn::ConvTranspose<double>(1, 2, 2, 3, {.output_padding = 1, .dilation = 2}));
  EXPECT_THROW(nn::ConvTranspose<double>(1, 2, 2, 3, {.stride = 2, .output_padding = -1}), Error);
  EXPECT_THROW(nn::ConvTranspose<double>(2, 2, 2, 3, {.stride = 2, .output_padding = {1, 1, 1}}),
               Error);
  // Invalid windows and sizes.
  EXPECT_THROW(nn::ConvTranspose<double>(4, 2, 2, 3), Error);
  EXPECT_THROW(nn::ConvTranspose<double>(1, 0, 2, 3), Error);
  EXPECT_THROW(nn::ConvTranspose<double>(1, 2, 2, 3, {.stride = 0}), Error);
  nn::ConvTranspose<double> layer(2, 3, 2, 3, {.stride = 2, .padding = 1});
  Tape tape;
  // Wrong channel count, wrong rank.
  EXPECT_NE(message([&] {
              layer.forward(tape, input(Shape{2, 4, 5, 5}, 1));
            }).find("ConvTranspose"),
            std::string::npos);
  EXPECT_THROW(layer.forward(tape, input(Shape{2, 3, 5}, 1)), Error);
  EXPECT_THROW(layer.forward(tape, input(Shape{2, 3, 5, 5, 5}, 1)), Error);
  // Padding that removes every output: (1 - 1) 2 - 2 * 3 + 2 + 1 < 1.
  nn::ConvTranspose<double> eats(1, 1, 1, 3, {.padding = 3});
  EXPECT_THROW(eats.forward(tape, input(Shape{1, 1, 1}, 1)), Error);
  // The functional form checks the output space against the geometry.
  const auto g = nn::conv_transpose_geometry(
      Shape{5}, nn::conv_transpose_windows(1, 3, {.stride = 2, .output_padding = 1}));
  EXPECT_EQ(g.in, (Shape{12}));
  EXPECT_EQ(g.out, (Shape{5}));
  Var<double> x = input(Shape{1, 2, 5}, 2);
  Var<double> w = input(Shape{2, 3, 3}, 3);
  EXPECT_THROW(nn::conv_transpose(tape, x, w, Var<double>(), g, test::local_space(Shape{1, 3, 11})),
               Error);
  EXPECT_NO_THROW(
      nn::conv_transpose(tape, x, w, Var<double>(), g, test::local_space(Shape{1, 3, 12})));
}

}  // namespace
