// Dot-product adjoint tests of attention's linear pieces (testing::adjoint_test of the tape's
// linearisations): batched matmul, matmul_nt and matmul_tn in each operand (bilinear, so linear in
// one with the other held fixed) at batch ranks 3 and 4, and the head split and merge of
// src/nn/heads.hpp (permutations), also in their tensor-parallel forms (split_heads_to,
// merge_heads_to); a wrong adjoint fails them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../src/nn/heads.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/linearisation.hpp"
#include "gradcheck.hpp"

using namespace distop;

namespace {

enum class Form { nn, nt, tn };

Var<double> product(Tape& tape, Form f, const Var<double>& a, const Var<double>& b) {
  switch (f) {
    case Form::nt:
      return nn::matmul_nt(tape, a, b);
    case Form::tn:
      return nn::matmul_tn(tape, a, b);
    default:
      return nn::matmul(tape, a, b);
  }
}

// A [..., m, k] (or [..., k, m] for tn), B [..., k, n] (or [..., n, k] for nt).
Shape with_batch(const std::vector<std::int64_t>& batch, std::int64_t r, std::int64_t c) {
  std::vector<std::int64_t> v = batch;
  v.push_back(r);
  v.push_back(c);
  return Shape(v);
}

void expect_adjoint(const LinearOperator<double>& op) {
  const auto report = distop::testing::adjoint_test(op);
  EXPECT_TRUE(report.passed) << report.str();
}

TEST(AttentionAdjoint, BatchedMatmulInEachOperand) {
  constexpr std::int64_t m = 3, k = 4, n = 2;
  for (const auto& batch : {std::vector<std::int64_t>{2}, std::vector<std::int64_t>{2, 3}}) {
    for (Form f : {Form::nn, Form::nt, Form::tn}) {
      SCOPED_TRACE("rank " + std::to_string(batch.size() + 2) + ", form " +
                   std::to_string(static_cast<int>(f)));
      const Shape as = f == Form::tn ? with_batch(batch, k, m) : with_batch(batch, m, k);
      const Shape bs = f == Form::nt ? with_batch(batch, n, k) : with_batch(batch, k, n);
      const TensorSpace a_space = test::local_space(as), b_space = test::local_space(bs);
      const TensorSpace c_space = test::local_space(with_batch(batch, m, n));
      Var<double> a(test::random_tensor<double>(a_space, 1), true);
      Var<double> b(test::random_tensor<double>(b_space, 2), true);
      const Var<double> a_fixed(test::random_tensor<double>(a_space, 3), false);
      const Var<double> b_fixed(test::random_tensor<double>(b_space, 4), false);
      expect_adjoint(distop::testing::TapeLinearisation<double>(
          a, c_space, [&](Tape& t) { return product(t, f, a, b_fixed); }, "matmul(A)"));
      expect_adjoint(distop::testing::TapeLinearisation<double>(
          b, c_space, [&](Tape& t) { return product(t, f, a_fixed, b); }, "matmul(B)"));
    }
  }
}

TEST(AttentionAdjoint, HeadSplitAndMerge) {
  constexpr std::int64_t batch = 2, seq = 3, parts = 3, heads = 2, d = 2;
  const TensorSpace rows = test::local_space(Shape{batch * seq, parts * heads * d});
  const TensorSpace head_space = test::local_space(Shape{batch, heads, seq, d});
  Var<double> x(test::random_tensor<double>(rows, 1), true);
  // Each part of the split (a gradient reaching one output only), and all of them summed.
  for (std::int64_t p = 0; p <= parts; ++p) {
    SCOPED_TRACE("part " + std::to_string(p));
    expect_adjoint(distop::testing::TapeLinearisation<double>(
        x, head_space,
        [&](Tape& t) {
          auto ys = nn::detail::split_heads(t, x, seq, parts, heads);
          if (p < parts) return ys[static_cast<std::size_t>(p)];
          return nn::add(t, nn::add(t, ys[0], ys[1]), ys[2]);
        },
        "split_heads"));
  }
  Var<double> h(test::random_tensor<double>(head_space, 2), true);
  expect_adjoint(distop::testing::TapeLinearisation<double>(
      h, test::local_space(Shape{batch * seq, heads * d}),
      [&](Tape& t) { return nn::detail::merge_heads(t, h); }, "merge_heads"));
  // The tensor-parallel forms on the same boxes.
  expect_adjoint(distop::testing::TapeLinearisation<double>(
      x, head_space,
      [&](Tape& t) { return nn::detail::split_heads_to(t, x, parts, head_space)[2]; },
      "split_heads_to"));
  expect_adjoint(distop::testing::TapeLinearisation<double>(
      h, test::local_space(Shape{batch * seq, heads * d}),
      [&](Tape& t) {
        return nn::detail::merge_heads_to(t, h, test::local_space(Shape{batch * seq, heads * d}));
      },
      "merge_heads_to"));
}

}  // namespace
