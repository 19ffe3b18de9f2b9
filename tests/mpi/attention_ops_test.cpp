// Batched matmul and the causal and masked softmax on attention-shaped tensors split across ranks:
// the batch and head axes split for the products, the query axis split for the causal softmax.
// Each rank computes its own boxes; values and gradients equal the one-rank computation, and
// batch axes split differently in the two operands are an Error on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <limits>
#include <string>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "gradcheck.hpp"
#include "mpi_gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::world_size;

namespace {

constexpr std::int64_t B = 3, H = 2, S = 5, D = 4;

// [B, H, rows, cols] with B split over grid axis 0 and H over grid axis 1 (as `split_heads`
// says), or the rows over grid axis 0 instead of B.
TensorSpace space(const Partition& p, std::int64_t rows, std::int64_t cols, bool split_rows) {
  return TensorSpace(p, Decomposition::balanced(Shape{B, H, rows, cols}, p.shape(),
                                                split_rows ? std::vector<int>{-1, 1, 0, -1}
                                                           : std::vector<int>{0, 1, -1, -1}));
}

Partition grid() {
  const int n = world_size();
  return Partition::world(n == 4 ? Shape{2, 2} : Shape{n, 1});
}

// scores = q k^T, then (causal) softmax, then attention = weights v; L = <attention, r>.
struct Outcome {
  Var<double> q, k, v, out;
};
Outcome attention(const TensorSpace& qs, bool causal, const DistTensor<double>* mask) {
  Var<double> q(random_tensor<double>(qs, 1), true);
  Var<double> k(random_tensor<double>(qs, 2), true);
  Var<double> v(random_tensor<double>(qs, 3), true);
  Tape tape;
  auto scores = nn::matmul_nt(tape, q, k);
  auto w = causal ? nn::causal_softmax(tape, scores)
           : mask ? nn::softmax(tape, scores, *mask)
                  : nn::softmax(tape, scores);
  auto out = nn::matmul(tape, w, v);
  auto loss = test::weighted_sum(tape, out, random_tensor<double>(out.space(), 4));
  backward(tape, loss);
  return {q, k, v, out};
}

}  // namespace

TEST(AttentionOps, SplitBatchAndHeadsEqualOneRank) {
  const double inf = std::numeric_limits<double>::infinity();
  DistTensor<double> mask(local_space(Shape{S, S}));
  std::vector<double> m(static_cast<std::size_t>(S * S), 0.0);
  m[1] = m[7] = m[13] = -inf;
  mask.local().copy_from(Tensor<double>::from_vector(Shape{S, S}, m));
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant == 0 ? "plain" : variant == 1 ? "causal" : "masked");
    const bool causal = variant == 1;
    const DistTensor<double>* mk = variant == 2 ? &mask : nullptr;
    const Outcome one = attention(local_space(Shape{B, H, S, D}), causal, mk);
    const Outcome d = attention(space(grid(), S, D, false), causal, mk);
    test::expect_box_near(d.out.value(), one.out.value().local().to_vector(), 1e-13, "out");
    test::expect_box_near(d.q.grad(), one.q.grad().local().to_vector(), 1e-12, "dq");
    test::expect_box_near(d.k.grad(), one.k.grad().local().to_vector(), 1e-12, "dk");
    test::expect_box_near(d.v.grad(), one.v.grad().local().to_vector(), 1e-12, "dv");
  }
}

TEST(AttentionOps, CausalSoftmaxWithSplitQueriesEqualsOneRank) {
  const Outcome one = [] {
    Var<double> x(random_tensor<double>(local_space(Shape{B, H, S, S}), 5), true);
    Tape t;
    auto y = nn::causal_softmax(t, x);
    backward(t, y, random_tensor<double>(y.space(), 6));
    return Outcome{x, x, x, y};
  }();
  Var<double> x(random_tensor<double>(space(grid(), S, S, true), 5), true);
  Tape tape;
  auto y = nn::causal_softmax(tape, x);
  test::expect_box_near(y.value(), one.out.value().local().to_vector(), 1e-15, "y");
  backward(tape, y, random_tensor<double>(y.space(), 6));
  test::expect_box_near(x.grad(), one.q.grad().local().to_vector(), 1e-14, "dx");
  const auto r = random_tensor<double>(x.space(), 7);
  test::expect_gradients_match_everywhere(
      [&](Tape& t) { return test::weighted_sum(t, nn::causal_softmax(t, x), r); }, {x}, 1e-6, 1e-6);
}

TEST(AttentionOps, BatchAxesSplitDifferentlyAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const Partition p = grid();
  Var<double> a(random_tensor<double>(space(p, S, D, false), 1), true);
  Var<double> b(random_tensor<double>(space(p, S, D, true), 2), true);
  Tape tape;
  EXPECT_NE(test::error_of([&] { nn::matmul_nt(tape, a, b); }).find("split alike"),
            std::string::npos);
}
