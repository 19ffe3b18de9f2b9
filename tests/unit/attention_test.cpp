#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/nn/multihead_attention.hpp"
#include "distop/nn/transformer_encoder_layer.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Var;
using distop::nn::AttentionMask;
using distop::nn::MultiheadAttention;
using distop::nn::TransformerEncoderLayer;
namespace test = distop::test;
using Vec = std::vector<double>;

Vec values(const Var<double>& v) { return v.value().local().to_vector(); }

// Overwrites a parameter with seeded uniform values (the biases start at zero).
void randomize(Var<double>& p, std::uint64_t seed) {
  p.value().local().copy_from(test::random_tensor<double>(p.space(), seed).local());
}

// torch's attention with plain loops: x [N, S, E] inputs, W [3E, E], b [3E], Wo [E, E], bo [E],
// mask [S, S2] (empty: none), causal.
Vec reference_attention(const Vec& query, const Vec& key, const Vec& value, int n_count, int s,
                        int s2, int e, int heads, const Vec& w, const Vec& b, const Vec& wo,
                        const Vec& bo, const Vec& mask, bool causal) {
  auto project = [&](const Vec& x, int seq, int part) {
    Vec out(static_cast<std::size_t>(n_count * seq * e));
    for (int r = 0; r < n_count * seq; ++r)
      for (int o = 0; o < e; ++o) {
        double acc = b[part * e + o];
        for (int k = 0; k < e; ++k) acc += x[r * e + k] * w[(part * e + o) * e + k];
        out[r * e + o] = acc;
      }
    return out;
  };
  const Vec q = project(query, s, 0), k = project(key, s2, 1), v = project(value, s2, 2);
  const int d = e / heads;
  Vec o(static_cast<std::size_t>(n_count * s * e), 0.0);
  for (int n = 0; n < n_count; ++n)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < s; ++i) {
        Vec p(static_cast<std::size_t>(s2));
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < s2; ++j) {
          double acc = 0;
          for (int c = 0; c < d; ++c)
            acc += q[(n * s + i) * e + h * d + c] * k[(n * s2 + j) * e + h * d + c];
          acc /= std::sqrt(static_cast<double>(d));
          if (!mask.empty()) acc += mask[i * s2 + j];
          if (causal && j > i) acc = -std::numeric_limits<double>::infinity();
          p[j] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (int j = 0; j < s2; ++j)
          for (int c = 0; c < d; ++c)
            o[(n * s + i) * e + h * d + c] += p[j] / sum * v[(n * s2 + j) * e + h * d + c];
      }
  Vec y(o.size());
  for (int r = 0; r < n_count * s; ++r)
    for (int c = 0; c < e; ++c) {
      double acc = bo[c];
      for (int m = 0; m < e; ++m) acc += o[r * e + m] * wo[c * e + m];
      y[r * e + c] = acc;
    }
  return y;
}

MultiheadAttention<double> random_mha(int e, int heads) {
  MultiheadAttention<double> mha(e, heads, {.seed = 5});
  randomize(mha.in_proj_bias(), 11);
  randomize(mha.out_proj().bias(), 12);
  return mha;
}

void expect_near(const Vec& got, const Vec& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "entry " << i;
}

TEST(MultiheadAttention, NamesShapesAndInitialisationAreTorchs) {
  MultiheadAttention<double> mha(8, 2, {.seed = 3});
  const auto named = mha.named_parameters();
  const std::vector<std::string> names{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                       "out_proj.bias"};
  const std::vector<Shape> shapes{Shape{24, 8}, Shape{24}, Shape{8, 8}, Shape{8}};
  ASSERT_EQ(named.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(named[i].name, names[i]);
    EXPECT_EQ(named[i].var.space().global_shape(), shapes[i]);
  }
  const auto state = mha.state_dict();
  ASSERT_EQ(state.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(state.at(names[i]).shape, shapes[i]);
  for (double v : values(mha.in_proj_weight())) EXPECT_LE(std::abs(v), std::sqrt(6.0 / 32));
  for (double v : values(mha.out_proj().weight())) EXPECT_LE(std::abs(v), 1 / std::sqrt(8.0));
  for (double v : values(mha.in_proj_bias())) EXPECT_EQ(v, 0.0);
  for (double v : values(mha.out_proj().bias())) EXPECT_EQ(v, 0.0);
  const auto w = values(mha.in_proj_weight());
  EXPECT_NE(w[0], w[1]);
  EXPECT_EQ(w, values(MultiheadAttention<double>(8, 2, {.seed = 3}).in_proj_weight()));
  EXPECT_NE(w, values(MultiheadAttention<double>(8, 2, {.seed = 4}).in_proj_weight()));
}

TEST(MultiheadAttention, SelfAttentionEqualsTheReferenceUnmaskedMaskedAndCausal) {
  const int n = 2, s = 3, e = 4, h = 2;
  auto mha = random_mha(e, h);
  auto x = test::random_tensor<double>(test::local_space(Shape{n, s, e}), 1);
  auto mask = test::random_tensor<double>(test::local_space(Shape{s, s}), 2, -2.0, 2.0);
  const Vec xv = x.local().to_vector();
  const Vec w = values(mha.in_proj_weight()), b = values(mha.in_proj_bias()),
            wo = values(mha.out_proj().weight()), bo = values(mha.out_proj().bias());
  Tape tape;
  const Var<double> xvar(x);
  const auto plain = mha.forward(tape, xvar);
  EXPECT_EQ(plain.space().global_shape(), (Shape{n, s, e}));
  expect_near(values(plain),
              reference_attention(xv, xv, xv, n, s, s, e, h, w, b, wo, bo, {}, false), 1e-12);
  expect_near(
      values(mha.forward(tape, xvar, {.attn_mask = mask})),
      reference_attention(xv, xv, xv, n, s, s, e, h, w, b, wo, bo, mask.local().to_vector(), false),
      1e-12);
  const auto causal = mha.forward(tape, xvar, {.is_causal = true});
  expect_near(values(causal),
              reference_attention(xv, xv, xv, n, s, s, e, h, w, b, wo, bo, {}, true), 1e-12);
  // The first query sees only the first key: different from the unmasked output.
  EXPECT_GT(std::abs(values(causal)[0] - values(plain)[0]), 1e-6);
  expect_near(
      values(mha.forward(tape, xvar, {.attn_mask = mask, .is_causal = true})),
      reference_attention(xv, xv, xv, n, s, s, e, h, w, b, wo, bo, mask.local().to_vector(), true),
      1e-12);
}

TEST(MultiheadAttention, CrossAttentionEqualsTheReference) {
  const int n = 2, s = 3, s2 = 5, e = 6, h = 3;
  auto mha = random_mha(e, h);
  auto q = test::random_tensor<double>(test::local_space(Shape{n, s, e}), 1);
  auto k = test::random_tensor<double>(test::local_space(Shape{n, s2, e}), 2);
  auto v = test::random_tensor<double>(test::local_space(Shape{n, s2, e}), 3);
  Tape tape;
  const auto y = mha.forward(tape, Var<double>(q), Var<double>(k), Var<double>(v));
  EXPECT_EQ(y.space().global_shape(), (Shape{n, s, e}));
  expect_near(values(y),
              reference_attention(
                  q.local().to_vector(), k.local().to_vector(), v.local().to_vector(), n, s, s2, e,
                  h, values(mha.in_proj_weight()), values(mha.in_proj_bias()),
                  values(mha.out_proj().weight()), values(mha.out_proj().bias()), {}, false),
              1e-12);
}

TEST(MultiheadAttention, DropoutActsInTrainingOnly) {
  MultiheadAttention<double> mha(4, 2, {.dropout = 0.5, .seed = 1});
  MultiheadAttention<double> ref(4, 2, {.seed = 1});
  auto x = test::random_tensor<double>(test::local_space(Shape{2, 3, 4}), 1);
  Tape tape;
  const Vec want = values(ref.forward(tape, Var<double>(x)));
  const Vec first = values(mha.forward(tape, Var<double>(x)));
  const Vec second = values(mha.forward(tape, Var<double>(x)));
  EXPECT_NE(first, want);
  EXPECT_NE(first, second);  // a fresh mask each call
  mha.eval();
  expect_near(values(mha.forward(tape, Var<double>(x))), want, 1e-15);
}

TEST(MultiheadAttention, GradientsMatchFiniteDifferences) {
  auto mha = random_mha(4, 2);
  Var<double> x(test::random_tensor<double>(test::local_space(Shape{2, 3, 4}), 1), true);
  Var<double> kv(test::random_tensor<double>(test::local_space(Shape{2, 2, 4}), 7), true);
  auto mask = test::random_tensor<double>(test::local_space(Shape{3, 3}), 2, -1.0, 1.0);
  std::vector<Var<double>> wrt{x};
  for (const auto& p : mha.parameters()) wrt.push_back(p);
  test::expect_gradients_match([&](Tape& t) { return mha.forward(t, x, {.attn_mask = mask}); },
                               wrt);
  test::expect_gradients_match([&](Tape& t) { return mha.forward(t, x, {.is_causal = true}); },
                               wrt);
  wrt.push_back(kv);
  test::expect_gradients_match([&](Tape& t) { return mha.forward(t, x, kv, kv); }, wrt);
}

TEST(MultiheadAttention, BadShapesAreErrors) {
  EXPECT_THROW(MultiheadAttention<double>(6, 4), distop::Error);
  MultiheadAttention<double> mha(4, 2);
  Tape tape;
  Var<double> flat(test::random_tensor<double>(test::local_space(Shape{3, 4}), 1));
  EXPECT_THROW(mha.forward(tape, flat), distop::Error);
  Var<double> wide(test::random_tensor<double>(test::local_space(Shape{2, 3, 5}), 1));
  EXPECT_THROW(mha.forward(tape, wide), distop::Error);
  Var<double> q(test::random_tensor<double>(test::local_space(Shape{2, 3, 4}), 1));
  Var<double> k(test::random_tensor<double>(test::local_space(Shape{2, 5, 4}), 1));
  Var<double> v(test::random_tensor<double>(test::local_space(Shape{2, 4, 4}), 1));
  EXPECT_THROW(mha.forward(tape, q, k, v), distop::Error);
  Var<double> other_batch(test::random_tensor<double>(test::local_space(Shape{3, 5, 4}), 1));
  EXPECT_THROW(mha.forward(tape, q, other_batch, other_batch), distop::Error);
}

TEST(TransformerEncoderLayer, StateDictNamesAndShapesAreTorchs) {
  TransformerEncoderLayer<double> layer(8, 2, 16, {.seed = 1});
  const std::vector<std::pair<std::string, Shape>> want{{"self_attn.in_proj_weight", Shape{24, 8}},
                                                        {"self_attn.in_proj_bias", Shape{24}},
                                                        {"self_attn.out_proj.weight", Shape{8, 8}},
                                                        {"self_attn.out_proj.bias", Shape{8}},
                                                        {"linear1.weight", Shape{16, 8}},
                                                        {"linear1.bias", Shape{16}},
                                                        {"linear2.weight", Shape{8, 16}},
                                                        {"linear2.bias", Shape{8}},
                                                        {"norm1.weight", Shape{8}},
                                                        {"norm1.bias", Shape{8}},
                                                        {"norm2.weight", Shape{8}},
                                                        {"norm2.bias", Shape{8}}};
  const auto named = layer.named_parameters();
  ASSERT_EQ(named.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(named[i].name, want[i].first);
    EXPECT_EQ(named[i].var.space().global_shape(), want[i].second);
  }
  const auto state = layer.state_dict();
  EXPECT_EQ(state.size(), want.size());  // the dropout counts are not persistent
  for (const auto& [name, shape] : want) EXPECT_EQ(state.at(name).shape, shape);
}

// Pre-norm: x + sa(norm1(x)), then + linear2(gelu(linear1(norm2(.)))), with plain loops.
TEST(TransformerEncoderLayer, ForwardEqualsTheReference) {
  const int n = 2, s = 3, e = 4, h = 2, f = 6;
  TransformerEncoderLayer<double> layer(e, h, f, {.dropout = 0.0, .seed = 2});
  randomize(layer.self_attn().in_proj_bias(), 3);
  randomize(layer.norm1().weight(), 4);
  randomize(layer.norm2().bias(), 5);
  auto x = test::random_tensor<double>(test::local_space(Shape{n, s, e}), 1);
  Tape tape;
  const Vec y = values(layer.forward(tape, Var<double>(x), {.is_causal = true}));
  auto norm = [&](const Vec& in, distop::nn::LayerNorm<double>& ln) {
    const Vec g = values(ln.weight()), b = values(ln.bias());
    Vec out(in.size());
    for (int r = 0; r < n * s; ++r) {
      double mean = 0, var = 0;
      for (int c = 0; c < e; ++c) mean += in[r * e + c] / e;
      for (int c = 0; c < e; ++c) var += (in[r * e + c] - mean) * (in[r * e + c] - mean) / e;
      for (int c = 0; c < e; ++c)
        out[r * e + c] = (in[r * e + c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
    }
    return out;
  };
  auto linear = [&](const Vec& in, distop::nn::Linear<double>& lin, int din, int dout) {
    const Vec w = values(lin.weight()), b = values(lin.bias());
    Vec out(static_cast<std::size_t>(n * s * dout));
    for (int r = 0; r < n * s; ++r)
      for (int o = 0; o < dout; ++o) {
        double acc = b[o];
        for (int k = 0; k < din; ++k) acc += in[r * din + k] * w[o * din + k];
        out[r * dout + o] = acc;
      }
    return out;
  };
  auto& sa = layer.self_attn();
  const Vec xv = x.local().to_vector(), n1 = norm(xv, layer.norm1());
  Vec h1 = reference_attention(n1, n1, n1, n, s, s, e, h, values(sa.in_proj_weight()),
                               values(sa.in_proj_bias()), values(sa.out_proj().weight()),
                               values(sa.out_proj().bias()), {}, true);
  for (std::size_t i = 0; i < h1.size(); ++i) h1[i] += xv[i];
  Vec a = linear(norm(h1, layer.norm2()), layer.linear1(), e, f);
  for (auto& v : a) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  Vec want = linear(a, layer.linear2(), f, e);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += h1[i];
  expect_near(y, want, 1e-12);
}

TEST(TransformerEncoderLayer, GradientsMatchFiniteDifferences) {
  TransformerEncoderLayer<double> layer(4, 2, 6, {.dropout = 0.0, .seed = 3});
  randomize(layer.self_attn().in_proj_bias(), 3);
  randomize(layer.self_attn().out_proj().bias(), 4);
  Var<double> x(test::random_tensor<double>(test::local_space(Shape{2, 3, 4}), 1), true);
  std::vector<Var<double>> wrt{x};
  for (const auto& p : layer.parameters()) wrt.push_back(p);
  test::expect_gradients_match([&](Tape& t) { return layer.forward(t, x); }, wrt);
}

TEST(TransformerEncoderLayer, BadInputsAreErrors) {
  EXPECT_THROW(TransformerEncoderLayer<double>(6, 4, 8), distop::Error);
  TransformerEncoderLayer<double> layer(4, 2, 6);
  Tape tape;
  Var<double> flat(test::random_tensor<double>(test::local_space(Shape{3, 4}), 1));
  EXPECT_THROW(layer.forward(tape, flat), distop::Error);
}

}  // namespace
