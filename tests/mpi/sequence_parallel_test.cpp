// Sequence-parallel attention (ring and all-to-all) over the ranks of the sequence axis, with the
// contiguous and the zigzag layouts, against attention on the whole tensors on every rank (the
// tape's matmul, softmax, causal softmax and dropout): outputs and the gradients of q, k and v to
// 1e-12 in double (and float rounding in float), without and with the causal mask and dropout, on
// uneven blocks, with the heads split over a second grid axis at 4 ranks; the dot-product test of
// the linearisation in v (attention is linear in v) and testing::gradcheck in q, k and v; the
// layouts' blocks and positions; bad spaces an Error on every rank.
#include "distop/nn/sequence_parallel.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/gradcheck.hpp"
#include "distop/testing/linearisation.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::error_of;
using distop::test::world_size;
using nn::SequenceLayout;
using nn::SequenceParallelStrategy;

namespace {

constexpr std::int64_t kBatch = 2, kDim = 3;

// q, k and v [N, H, S, D] on a partition whose grid axis seq_axis splits S (as the layout says)
// and, where head_axis >= 0, another axis splits the heads.
struct Layout {
  std::string name;
  Partition partition;
  int seq_axis;
  int head_axis;
  std::int64_t seq;
  int parts() const { return static_cast<int>(partition.shape()[seq_axis]); }
  // At least P per group of heads, which the all-to-all strategy needs.
  std::int64_t heads() const {
    return std::max<std::int64_t>(2, parts()) * (head_axis < 0 ? 1 : partition.shape()[head_axis]);
  }
  TensorSpace space(SequenceLayout layout) const {
    const Shape& grid = partition.shape();
    const std::int64_t t = head_axis < 0 ? 1 : grid[head_axis];
    return TensorSpace(partition,
                       Decomposition::blocks(Shape{kBatch, heads(), seq, kDim}, grid,
                                             {{kBatch},
                                              std::vector<std::int64_t>(t, heads() / t),
                                              nn::sequence_blocks(seq, parts(), layout),
                                              {kDim}},
                                             {-1, t > 1 ? head_axis : -1, seq_axis, -1}));
  }
};

std::vector<Layout> layouts() {
  const int n = world_size();
  std::vector<Layout> out;
  out.push_back({"sequence over all ranks", Partition::world(Shape{n}), 0, -1, 2 * n + 3});
  if (n == 4) {
    out.push_back({"heads x sequence 2 x 2", Partition::world(Shape{2, 2}), 1, 0, 6});
    out.push_back({"sequence x heads 2 x 2", Partition::world(Shape{2, 2}), 0, 1, 5});
  }
  if (n >= 2)
    out.push_back({"sequence over 2 of the ranks", Partition::world(Shape{2}, {0, 1}), 0, -1, 7});
  return out;
}

// Entry (n, h, s, d) of a seeded global tensor [N, H, S, D] in positions' order.
double global_value(std::uint64_t seed, std::int64_t index) {
  return 2.0 * random::uniform(seed, static_cast<std::uint64_t>(index)) - 1.0;
}

// This rank's box of the tensor whose global index i along S holds the token at position
// positions[i] of the seeded tensor.
template <class T>
DistTensor<T> box_of(const TensorSpace& space, std::uint64_t seed,
                     const std::vector<std::int64_t>& positions) {
  const Shape& g = space.global_shape();
  std::vector<T> values;
  for (std::int64_t i : space.global_indices()) {
    const std::int64_t d = i % g[3], s = (i / g[3]) % g[2], nh = i / (g[3] * g[2]);
    values.push_back(static_cast<T>(global_value(seed, (nh * g[2] + positions[s]) * g[3] + d)));
  }
  return DistTensor<T>(space, Tensor<T>::from_vector(space.local_shape(), values));
}

// Attention on the whole tensors (positions' order) on this rank alone, and its gradients for the
// output gradient seeded `dy_seed`.
struct Reference {
  std::vector<double> y, dq, dk, dv;
};

Reference reference(const Layout& l, bool causal, double p, std::uint64_t dropout_seed) {
  const Partition self = Partition::self(Shape{1});
  const TensorSpace whole(self, Decomposition::balanced(Shape{kBatch, l.heads(), l.seq, kDim},
                                                        self.shape(), {-1, -1, -1, -1}));
  std::vector<std::int64_t> identity(static_cast<std::size_t>(l.seq));
  for (std::int64_t i = 0; i < l.seq; ++i) identity[static_cast<std::size_t>(i)] = i;
  Var<double> q(box_of<double>(whole, 1, identity), true),
      k(box_of<double>(whole, 2, identity), true), v(box_of<double>(whole, 3, identity), true);
  Tape tape;
  Var<double> s = nn::matmul_nt(tape, nn::scale(tape, q, 1.0 / std::sqrt(double(kDim))), k);
  Var<double> w = causal ? nn::causal_softmax(tape, s) : nn::softmax(tape, s);
  if (p > 0) w = nn::dropout(tape, w, p, dropout_seed, true);
  Var<double> y = nn::matmul(tape, w, v);
  backward(tape, y, box_of<double>(whole, 4, identity));
  return {y.value().local().to_vector(), q.grad().local().to_vector(), k.grad().local().to_vector(),
          v.grad().local().to_vector()};
}

// The largest |a - reference| over this rank's box (global index i along S at position
// positions[i]).
template <class T>
double worst(const DistTensor<T>& a, const std::vector<double>& whole,
             const std::vector<std::int64_t>& positions) {
  const Shape& g = a.space().global_shape();
  const auto idx = a.space().global_indices();
  const auto values = a.local().to_vector();
  double err = 0;
  for (std::size_t e = 0; e < idx.size(); ++e) {
    const std::int64_t i = idx[e];
    const std::int64_t d = i % g[3], s = (i / g[3]) % g[2], nh = i / (g[3] * g[2]);
    const double ref = whole[static_cast<std::size_t>((nh * g[2] + positions[s]) * g[3] + d)];
    err = std::max(err, std::abs(static_cast<double>(values[e]) - ref));
  }
  return err;
}

struct Case {
  SequenceParallelStrategy strategy;
  SequenceLayout layout;
  bool causal;
  double dropout;
};

std::string str(const Case& c) {
  return std::string(nn::to_string(c.strategy)) +
         (c.layout == SequenceLayout::zigzag ? " zigzag" : " contiguous") +
         (c.causal ? " causal" : "") + (c.dropout > 0 ? " dropout" : "");
}

template <class T>
void check_against_reference(const Layout& l, const Case& c, double tolerance) {
  SCOPED_TRACE(l.name + ", " + str(c));
  const TensorSpace space = l.space(c.layout);
  const nn::SequenceParallelAttention<T> attention(
      space, {.sequence_axis = l.seq_axis, .strategy = c.strategy, .layout = c.layout});
  const auto pos = nn::sequence_positions(l.seq, l.parts(), c.layout);
  Var<T> q(box_of<T>(space, 1, pos), true), k(box_of<T>(space, 2, pos), true),
      v(box_of<T>(space, 3, pos), true);
  Tape tape;
  Var<T> y = attention.forward(tape, q, k, v,
                               {.is_causal = c.causal, .dropout = c.dropout, .dropout_seed = 17});
  backward(tape, y, box_of<T>(space, 4, pos));
  const Reference ref = reference(l, c.causal, c.dropout, 17);
  EXPECT_LE(worst(y.value(), ref.y, pos), tolerance);
  EXPECT_LE(worst(q.grad(), ref.dq, pos), tolerance);
  EXPECT_LE(worst(k.grad(), ref.dk, pos), tolerance);
  EXPECT_LE(worst(v.grad(), ref.dv, pos), tolerance);
}

const std::vector<Case> kCases = {
    {SequenceParallelStrategy::ring, SequenceLayout::contiguous, false, 0},
    {SequenceParallelStrategy::ring, SequenceLayout::contiguous, true, 0},
    {SequenceParallelStrategy::ring, SequenceLayout::zigzag, true, 0},
    {SequenceParallelStrategy::ring, SequenceLayout::contiguous, true, 0.3},
    {SequenceParallelStrategy::alltoall, SequenceLayout::contiguous, false, 0},
    {SequenceParallelStrategy::alltoall, SequenceLayout::zigzag, true, 0},
    {SequenceParallelStrategy::alltoall, SequenceLayout::contiguous, true, 0.3},
};

}  // namespace

TEST(SequenceParallel, LayoutsBlocksAndPositions) {
  EXPECT_EQ(nn::sequence_blocks(10, 2, SequenceLayout::contiguous),
            (std::vector<std::int64_t>{5, 5}));
  // 2P = 4 chunks of 10: 3, 3, 2, 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(nn::sequence_blocks(10, 2, SequenceLayout::zigzag), (std::vector<std::int64_t>{5, 5}));
  EXPECT_EQ(nn::sequence_positions(10, 2, SequenceLayout::zigzag),
            (std::vector<std::int64_t>{0, 1, 2, 8, 9, 3, 4, 5, 6, 7}));
  EXPECT_EQ(nn::sequence_positions(3, 1, SequenceLayout::zigzag),
            (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(nn::parse_sequence_parallel_strategy("alltoall"), SequenceParallelStrategy::alltoall);
  EXPECT_NE(error_of([] {
              (void)nn::parse_sequence_parallel_strategy("ulysses");
            }).find("expected ring or alltoall"),
            std::string::npos);
}

// Every case on the sequence split over all ranks; the two strategies' main cases on the others.
TEST(SequenceParallel, EqualsWholeAttentionInDouble) {
  const auto all = layouts();
  for (const Case& c : kCases) check_against_reference<double>(all.front(), c, 1e-12);
  for (std::size_t i = 1; i < all.size(); ++i)
    for (const Case& c : {kCases[2], kCases[4]}) check_against_reference<double>(all[i], c, 1e-12);
}

TEST(SequenceParallel, EqualsWholeAttentionInFloat) {
  for (const Case& c : {kCases[3], kCases[5]})
    check_against_reference<float>(layouts().front(), c, 2e-6);
}

// Zigzag with dropout: the masks are keyed by the tensors' order, so both strategies draw the
// same ones.
TEST(SequenceParallel, RingAndAllToAllAgreeUnderZigzagDropout) {
  const Layout l = layouts().front();
  const TensorSpace space = l.space(SequenceLayout::zigzag);
  const auto pos = nn::sequence_positions(l.seq, l.parts(), SequenceLayout::zigzag);
  std::vector<std::vector<double>> outputs;
  for (auto strategy : {SequenceParallelStrategy::ring, SequenceParallelStrategy::alltoall}) {
    const nn::SequenceParallelAttention<double> attention(
        space, {.sequence_axis = 0, .strategy = strategy, .layout = SequenceLayout::zigzag});
    Var<double> q(box_of<double>(space, 1, pos), true), k(box_of<double>(space, 2, pos), true),
        v(box_of<double>(space, 3, pos), true);
    Tape tape;
    Var<double> y =
        attention.forward(tape, q, k, v, {.is_causal = true, .dropout = 0.4, .dropout_seed = 5});
    backward(tape, y, box_of<double>(space, 4, pos));
    auto all = y.value().local().to_vector();
    for (const auto* g : {&q, &k, &v})
      for (double x : g->grad().local().to_vector()) all.push_back(x);
    outputs.push_back(all);
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (std::size_t i = 0; i < outputs[0].size(); ++i)
    EXPECT_NEAR(outputs[0][i], outputs[1][i], 1e-12);
}

// Attention is linear in v: the linearisation in v must pass the dot-product test, i.e. the ring's
// reverse pass (the value gradients travelling back) is the exact adjoint of its forward.
TEST(SequenceParallel, AdjointInValues) {
  const auto all = layouts();
  for (std::size_t i = 0; i < all.size(); ++i)
    for (auto strategy : {SequenceParallelStrategy::ring, SequenceParallelStrategy::alltoall}) {
      if (i > 0 && strategy == SequenceParallelStrategy::alltoall) continue;
      const Layout& l = all[i];
      const SequenceLayout layout = i == 0 ? SequenceLayout::contiguous : SequenceLayout::zigzag;
      SCOPED_TRACE(l.name);
      const TensorSpace space = l.space(layout);
      auto attention = std::make_shared<nn::SequenceParallelAttention<double>>(
          space, nn::SequenceParallel{
                     .sequence_axis = l.seq_axis, .strategy = strategy, .layout = layout});
      const auto pos = nn::sequence_positions(l.seq, l.parts(), layout);
      Var<double> q(box_of<double>(space, 1, pos), false), k(box_of<double>(space, 2, pos), false);
      Var<double> v(DistTensor<double>(space), true);
      const distop::testing::TapeLinearisation<double> lin(v, space, [=](Tape& tape) {
        return attention->forward(tape, q, k, v, {.is_causal = true});
      });
      const auto report = distop::testing::adjoint_test(lin);
      EXPECT_TRUE(report.passed) << report.str();
    }
}

TEST(SequenceParallel, Gradcheck) {
  const Layout l = layouts().front();
  for (auto strategy : {SequenceParallelStrategy::ring, SequenceParallelStrategy::alltoall}) {
    const TensorSpace space = l.space(SequenceLayout::zigzag);
    const nn::SequenceParallelAttention<double> attention(
        space, {.sequence_axis = 0, .strategy = strategy, .layout = SequenceLayout::zigzag});
    const auto pos = nn::sequence_positions(l.seq, l.parts(), SequenceLayout::zigzag);
    Var<double> q(box_of<double>(space, 1, pos), true), k(box_of<double>(space, 2, pos), true),
        v(box_of<double>(space, 3, pos), true);
    const auto report = distop::testing::gradcheck(
        [&](Tape& tape) { return attention.forward(tape, q, k, v, {.is_causal = true}); },
        {q, k, v}, {.max_entries = 4});
    EXPECT_TRUE(report.passed) << report.str();
  }
}

TEST(SequenceParallel, BadSpacesAreErrorsOnEveryRank) {
  const Layout l = layouts().front();
  const int n = world_size();
  // A sequence axis left whole on more than one rank.
  if (n > 1) {
    const TensorSpace whole_seq(l.partition,
                                Decomposition::balanced(Shape{kBatch, l.heads(), l.seq, kDim},
                                                        l.partition.shape(), {-1, 0, -1, -1}));
    EXPECT_NE(error_of([&] {
                nn::SequenceParallelAttention<double>(whole_seq, {});
              }).find("S split over grid axis 0"),
              std::string::npos);
  }
  if (n > 2) {  // too few heads for the all-to-all split
    const TensorSpace few(
        l.partition,
        Decomposition::blocks(
            Shape{kBatch, 2, l.seq, kDim}, l.partition.shape(),
            {{kBatch}, {2}, nn::sequence_blocks(l.seq, n, SequenceLayout::contiguous), {kDim}},
            {-1, -1, 0, -1}));
    EXPECT_NE(error_of([&] {
                nn::SequenceParallelAttention<double>(
                    few, {.strategy = SequenceParallelStrategy::alltoall});
              }).find("needs at least"),
              std::string::npos);
  }
  EXPECT_NE(error_of([&] {
              nn::SequenceParallelAttention<double>(l.space(SequenceLayout::contiguous),
                                                    {.sequence_axis = 1});
            }).find("not a grid axis"),
            std::string::npos);
  const nn::SequenceParallelAttention<double> attention(l.space(SequenceLayout::contiguous), {});
  const TensorSpace other(
      l.partition, Decomposition::balanced(Shape{kBatch, l.heads(), l.seq, 4}, l.partition.shape(),
                                           {-1, -1, 0, -1}));
  Var<double> q(DistTensor<double>(l.space(SequenceLayout::contiguous)), true);
  Var<double> wrong(DistTensor<double>(other), true);
  EXPECT_NE(error_of([&] {
              Tape tape;
              (void)attention.forward(tape, q, wrong, q);
            }).find("SequenceParallelAttention"),
            std::string::npos);
}
