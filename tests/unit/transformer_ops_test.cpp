// The transformer vocabulary on one rank: GELU (both forms) and SiLU, LayerNorm, batched matmul,
// the masked and causal softmax, dropout on 4-D attention weights and Embedding. Values against
// closed forms computed here, gradients against finite differences in double, bad input an Error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/embedding.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/layer_norm.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "gradcheck.hpp"

using namespace distop;

namespace {

constexpr double kPi = 3.14159265358979323846;

Var<double> input(const Shape& shape, std::uint64_t seed, double lo = -2, double hi = 2) {
  return Var<double>(test::random_tensor<double>(test::local_space(shape), seed, lo, hi), true);
}

// <f(inputs), r> checked against central differences for every input.
template <class F>
void expect_gradcheck(const F& f, const std::vector<Var<double>>& inputs, std::uint64_t seed,
                      double tol = 1e-6) {
  Tape probe;
  const TensorSpace ys = f(probe).space();
  const auto r = test::random_tensor<double>(ys, seed);
  test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, f(t), r); }, inputs,
                               1e-6, tol);
}

DistTensor<double> tensor(const Shape& shape, const std::vector<double>& v) {
  DistTensor<double> t(test::local_space(shape));
  t.local().copy_from(Tensor<double>::from_vector(shape, v));
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// ---- GELU and SiLU ------------------------------------------------------------------------------

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1 + std::exp(-x)); }

TEST(TransformerOps, GeluAndSiluValuesMatchTheirDefinitions) {
  const std::vector<double> xs{-30, -5, -1.5, -0.3, 0, 1e-3, 0.7, 1, 2.5, 8, 40};
  Var<double> x(tensor(Shape{static_cast<std::int64_t>(xs.size())}, xs), false);
  Tape tape;
  const auto g = nn::gelu(tape, x).value().local().to_vector();
  const auto gt = nn::gelu(tape, x, nn::GeluApproximate::tanh).value().local().to_vector();
  const auto s = nn::silu(tape, x).value().local().to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(g[i], gelu_ref(xs[i]), 1e-15 * std::max(1.0, std::abs(xs[i]))) << xs[i];
    EXPECT_NEAR(gt[i], gelu_tanh_ref(xs[i]), 1e-15 * std::max(1.0, std::abs(xs[i]))) << xs[i];
    EXPECT_NEAR(s[i], silu_ref(xs[i]), 1e-15 * std::max(1.0, std::abs(xs[i]))) << xs[i];
  }
  // torch.nn.functional.gelu(torch.tensor(1.0, dtype=torch.float64)) and its tanh form.
  EXPECT_NEAR(g[7], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(gt[7], 0.8411919906082768, 1e-15);
  EXPECT_NE(g[7], gt[7]);
  // Float, through the kernels.
  auto xf = Tensor<float>::from_vector(Shape{3}, {-1.5f, 0.7f, 2.5f});
  auto yf = Tensor<float>::uninitialized(Shape{3});
  kernels::gelu(xf, yf);
  const auto gf = yf.to_vector();
  kernels::silu(xf, yf);
  const auto sf = yf.to_vector();
  EXPECT_NEAR(gf[0], gelu_ref(-1.5), 2e-7);
  EXPECT_NEAR(gf[2], gelu_ref(2.5), 4e-7);
  EXPECT_NEAR(sf[1], silu_ref(0.7), 2e-7);
}

TEST(TransformerOps, GeluAndSiluGradientsMatchFiniteDifferences) {
  Var<double> x = input(Shape{4, 6}, 1, -3, 3);
  expect_gradcheck([&](Tape& t) { return nn::gelu(t, x); }, {x}, 2);
  expect_gradcheck([&](Tape& t) { return nn::gelu(t, x, nn::GeluApproximate::tanh); }, {x}, 3);
  expect_gradcheck([&](Tape& t) { return nn::silu(t, x); }, {x}, 4);
  Tape tape;
  nn::gelu(tape, x, nn::GeluApproximate::tanh);
  nn::silu(tape, x);
  EXPECT_EQ(tape.names(), (std::vector<std::string>{"gelu", "silu"}));
}

// ---- LayerNorm ----------------------------------------------------------------------------------

std::vector<double> layer_norm_ref(const std::vector<double>& x, std::size_t d,
                                   const std::vector<double>& w, const std::vector<double>& b,
                                   double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    var /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + eps) * (w.empty() ? 1 : w[j]) +
                     (b.empty() ? 0 : b[j]);
  }
  return y;
}

TEST(TransformerOps, LayerNormMatchesTorchsDefinition) {
  nn::LayerNorm<double> norm(5, {.eps = 1e-3});
  const auto sd = norm.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(std::get<0>(sd.at("weight").values), std::vector<double>(5, 1.0));
  EXPECT_EQ(std::get<0>(sd.at("bias").values), std::vector<double>(5, 0.0));
  norm.weight().value().local().copy_from(
      Tensor<double>::from_vector(Shape{5}, {0.5, 1, 1.5, -1, 2}));
  norm.bias().value().local().copy_from(Tensor<double>::from_vector(Shape{5}, {0, 1, -1, 2, 0.5}));
  // Rows far from 0 (a mean of 1e4 against a spread of 1): the variance must not cancel.
  Var<double> x = input(Shape{2, 3, 5}, 5);
  auto xv = x.value().local().to_vector();
  for (std::size_t i = 0; i < 5; ++i) xv[i] += 1e4;
  x.value().local().copy_from(Tensor<double>::from_vector(Shape{2, 3, 5}, xv));
  Tape tape;
  const auto y = norm.forward(tape, x).value().local().to_vector();
  const auto want = layer_norm_ref(xv, 5, {0.5, 1, 1.5, -1, 2}, {0, 1, -1, 2, 0.5}, 1e-3);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-11) << i;
  EXPECT_EQ(tape.names(), (std::vector<std::string>{"layer_norm"}));

  nn::LayerNorm<double> plain(5, {.elementwise_affine = false});
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_THROW(plain.weight(), Error);
  const auto yp = plain.forward(tape, x).value().local().to_vector();
  const auto wantp = layer_norm_ref(xv, 5, {}, {}, 1e-5);
  for (std::size_t i = 0; i < yp.size(); ++i) EXPECT_NEAR(yp[i], wantp[i], 1e-11) << i;
  nn::LayerNorm<double> no_bias(5, {.bias = false});
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_THROW(no_bias.bias(), Error);
}

TEST(TransformerOps, LayerNormGradientsMatchFiniteDifferences) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    nn::LayerNorm<double> norm(6, {.elementwise_affine = variant != 2, .bias = variant == 0});
    std::vector<Var<double>> wrt;
    Var<double> x = input(Shape{2, 3, 6}, 6);
    wrt.push_back(x);
    for (auto& p : norm.named_parameters()) {
      p.var.value().local().copy_from(
          test::random_tensor<double>(p.var.space(), 7 + wrt.size(), 0.5, 1.5).local());
      wrt.push_back(p.var);
    }
    expect_gradcheck([&](Tape& t) { return norm.forward(t, x); }, wrt, 8);
  }
}

TEST(TransformerOps, LayerNormFloatMatchesDouble) {
  nn::LayerNorm<double> nd(8);
  nn::LayerNorm<float> nf(8);
  test::expect_float_matches_double(
      test::local_space(Shape{4, 8}),
      [&](Tape& t, const Var<double>& x) { return nd.forward(t, x); },
      [&](Tape& t, const Var<float>& x) { return nf.forward(t, x); }, 2e-5);
}

TEST(TransformerOps, LayerNormBadInputIsAnError) {
  nn::LayerNorm<double> norm(6);
  Tape tape;
  Var<double> x = input(Shape{2, 5}, 9);
  EXPECT_NE(error_of([&] { norm.forward(tape, x); }).find("expected an input [..., 6]"),
            std::string::npos);
  EXPECT_THROW(nn::LayerNorm<double>(0), Error);
  EXPECT_THROW(nn::LayerNorm<double>(4, {.eps = 0}), Error);
  EXPECT_THROW(nn::LayerNorm<double>(4, Partition::self(), {.split_axis = 1}), Error);
  EXPECT_THROW(nn::LayerNorm<double>(4, Partition::self(), {.split_axis = 0, .split_extents = {3}}),
               Error);
}

// ---- Batched matmul -----------------------------------------------------------------------------

// c[b] = op(a[b]) op(b[b]) for every batch b, directly.
std::vector<double> bmm_ref(const std::vector<double>& a, const std::vector<double>& b,
                            std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n,
                            bool ta, bool tb) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n));
  for (std::int64_t q = 0; q < batch; ++q)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          const double av = a[static_cast<std::size_t>(q * m * k + (ta ? l * m + i : i * k + l))];
          const double bv = b[static_cast<std::size_t>(q * k * n + (tb ? j * k + l : l * n + j))];
          s += av * bv;
        }
        c[static_cast<std::size_t>(q * m * n + i * n + j)] = s;
      }
  return c;
}

TEST(TransformerOps, BatchedMatmulMultipliesEveryMatrix) {
  const std::int64_t B = 2, H = 3, m = 4, k = 5, n = 3;
  for (int form = 0; form < 3; ++form) {
    const bool ta = form == 2, tb = form == 1;
    SCOPED_TRACE(form);
    Var<double> a = input(ta ? Shape{B, H, k, m} : Shape{B, H, m, k}, 10);
    Var<double> b = input(tb ? Shape{B, H, n, k} : Shape{B, H, k, n}, 11);
    auto f = [&](Tape& t) {
      return ta ? nn::matmul_tn(t, a, b) : tb ? nn::matmul_nt(t, a, b) : nn::matmul(t, a, b);
    };
    Tape tape;
    const Var<double> c = f(tape);
    EXPECT_EQ(c.space().global_shape(), (Shape{B, H, m, n}));
    const auto want = bmm_ref(a.value().local().to_vector(), b.value().local().to_vector(), B * H,
                              m, k, n, ta, tb);
    const auto got = c.value().local().to_vector();
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-13) << i;
    expect_gradcheck(f, {a, b}, 12);
  }
}

TEST(TransformerOps, BatchedMatmulBadShapesAreErrors) {
  Tape tape;
  Var<double> a = input(Shape{2, 3, 4, 5}, 13);
  EXPECT_NE(error_of([&] {
              nn::matmul(tape, a, input(Shape{2, 2, 5, 3}, 14));
            }).find("batch (leading) axes must be equal"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              nn::matmul(tape, a, input(Shape{2, 3, 4, 3}, 14));
            }).find("contracted extents differ"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              nn::matmul(tape, a, input(Shape{5, 3}, 14));
            }).find("batched ones"),
            std::string::npos);
}

// ---- Masked and causal softmax ------------------------------------------------------------------

std::vector<double> softmax_rows(std::vector<double> z, std::size_t n) {
  for (std::size_t r = 0; r < z.size() / n; ++r) {
    double mx = -std::numeric_limits<double>::infinity(), s = 0;
    for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, z[r * n + j]);
    for (std::size_t j = 0; j < n; ++j) s += std::exp(z[r * n + j] - mx);
    for (std::size_t j = 0; j < n; ++j) z[r * n + j] = std::exp(z[r * n + j] - mx) / s;
  }
  return z;
}

TEST(TransformerOps, SoftmaxWithAnAdditiveMask) {
  const std::int64_t B = 2, H = 2, S = 3, S2 = 4;
  Var<double> x = input(Shape{B, H, S, S2}, 15);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> m{0, -inf, 0, -1.5, 0, 0, -inf, 0.5, -inf, -inf, 0, 0};
  const DistTensor<double> mask = tensor(Shape{S, S2}, m);
  Tape tape;
  const auto y = nn::softmax(tape, x, mask).value().local().to_vector();
  auto z = x.value().local().to_vector();
  for (std::size_t i = 0; i < z.size(); ++i) z[i] += m[i % m.size()];
  const auto want = softmax_rows(z, S2);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-15) << i;
  EXPECT_EQ(y[1], 0.0);
  expect_gradcheck([&](Tape& t) { return nn::softmax(t, x, mask); }, {x}, 16);
  EXPECT_THROW(nn::softmax(tape, x, test::random_tensor<double>(test::local_space({S, 3}), 1)),
               Error);
}

TEST(TransformerOps, CausalSoftmaxMasksTheUpperTriangle) {
  const std::int64_t B = 2, H = 3, S = 4, S2 = 5;
  Var<double> x = input(Shape{B, H, S, S2}, 17);
  Tape tape;
  const auto y = nn::causal_softmax(tape, x).value().local().to_vector();
  auto z = x.value().local().to_vector();
  for (std::size_t e = 0; e < z.size(); ++e)
    if (static_cast<std::int64_t>(e) % S2 > static_cast<std::int64_t>(e) / S2 % S)
      z[e] = -std::numeric_limits<double>::infinity();
  const auto want = softmax_rows(z, S2);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-15) << i;
  EXPECT_EQ(y[0], 1.0);  // row 0 attends to entry 0 alone
  expect_gradcheck([&](Tape& t) { return nn::causal_softmax(t, x); }, {x}, 18);
  EXPECT_THROW(nn::causal_softmax(tape, input(Shape{5}, 1)), Error);
}

// ---- Dropout on attention weights ---------------------------------------------------------------

TEST(TransformerOps, DropoutOnFourDimensionalAttentionWeights) {
  const Shape shape{2, 3, 8, 8};
  Var<double> x = input(shape, 19, 0.5, 1.5);
  Tape tape;
  const auto w = nn::softmax(tape, x);
  const double p = 0.25;
  const auto y = nn::dropout(tape, w, p, 77).value().local().to_vector();
  const auto wv = w.value().local().to_vector();
  std::int64_t dropped = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const bool drop = random::uniform(77, i) < p;
    dropped += drop ? 1 : 0;
    EXPECT_NEAR(y[i], drop ? 0.0 : wv[i] / (1 - p), 1e-15) << i;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, static_cast<std::int64_t>(y.size()) / 2);
  expect_gradcheck([&](Tape& t) { return nn::dropout(t, nn::softmax(t, x), p, 77); }, {x}, 20);
}

// ---- Embedding ----------------------------------------------------------------------------------

TEST(TransformerOps, EmbeddingLooksUpRowsAndScatterAddsGradients) {
  nn::Embedding<double> emb(7, 3, {.seed = 4});
  const auto sd = emb.state_dict();
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd.at("weight").shape, (Shape{7, 3}));
  const auto w = emb.weight().value().local().to_vector();
  // N(0, 1), counter-based.
  const std::uint64_t seed = nn::parameter_seed(4, "weight");
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], random::normal(seed, i));
  const DistTensor<double> idx = tensor(Shape{2, 3}, {3, 0, 6, 3, 3, 1});
  Tape tape;
  Var<double> y = emb.forward(tape, idx);
  EXPECT_EQ(y.space().global_shape(), (Shape{2, 3, 3}));
  const auto yv = y.value().local().to_vector();
  const std::vector<int> rows{3, 0, 6, 3, 3, 1};
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < 3; ++j)
      EXPECT_EQ(yv[i * 3 + j], w[static_cast<std::size_t>(rows[i]) * 3 + j]);
  const auto dy = test::random_tensor<double>(y.space(), 21);
  backward(tape, y, dy);
  const auto g = emb.weight().grad().local().to_vector();
  const auto d = dy.local().to_vector();
  for (std::size_t v = 0; v < 7; ++v)
    for (std::size_t j = 0; j < 3; ++j) {
      double want = 0;
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (static_cast<std::size_t>(rows[i]) == v) want += d[i * 3 + j];
      EXPECT_NEAR(g[v * 3 + j], want, 1e-15) << v << ", " << j;
    }
  emb.weight().zero_grad();
  expect_gradcheck([&](Tape& t) { return emb.forward(t, idx); }, {emb.weight()}, 22);
}

TEST(TransformerOps, EmbeddingPaddingRowIsZeroAndGetsNoGradient) {
  nn::Embedding<double> emb(5, 2, {.padding_idx = -2, .seed = 1});  // row 3
  const auto w = emb.weight().value().local().to_vector();
  EXPECT_EQ(w[6], 0.0);
  EXPECT_EQ(w[7], 0.0);
  EXPECT_NE(w[8], 0.0);
  const DistTensor<double> idx = tensor(Shape{4}, {3, 1, 3, 4});
  Tape tape;
  Var<double> y = emb.forward(tape, idx);
  backward(tape, y, test::random_tensor<double>(y.space(), 2));
  const auto g = emb.weight().grad().local().to_vector();
  EXPECT_EQ(g[6], 0.0);
  EXPECT_EQ(g[7], 0.0);
  EXPECT_NE(g[2], 0.0);
  EXPECT_THROW(nn::Embedding<double>(5, 2, {.padding_idx = 5}), Error);
}

TEST(TransformerOps, EmbeddingBadIndicesAreErrors) {
  nn::Embedding<float> emb(5, 2);
  Tape tape;
  auto bad = [&](std::vector<float> v) {
    DistTensor<float> idx(test::local_space(Shape{static_cast<std::int64_t>(v.size())}));
    idx.local().copy_from(Tensor<float>::from_vector(idx.local().shape(), v));
    return error_of([&] { emb.forward(tape, idx); });
  };
  EXPECT_NE(bad({0, 5}).find("index 5"), std::string::npos);
  EXPECT_NE(bad({-1}).find("not an integer in [0, 5)"), std::string::npos);
  EXPECT_NE(bad({1.5f}).find("not an integer"), std::string::npos);
  EXPECT_EQ(bad({0, 4, 2}), "no error");
  EXPECT_THROW(nn::Embedding<float>(0, 2), Error);
}

}  // namespace
