// Embedding across ranks: the vocabulary-parallel form (rows split over a grid axis, partial
// lookups added by AllSumReduce) equals the one-rank lookup, its gradient is the one-rank
// gradient summed over the group's copies of the output, its tape adjoint passes the dot-product
// test and its gradient matches finite differences, with balanced and uneven row splits (down to
// one row per rank); a bad index on one rank is an Error on every rank.
#include "distop/nn/embedding.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/gradcheck.hpp"
#include "distop/testing/linearisation.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr std::int64_t kDim = 3;

struct Layout {
  std::string name;
  Partition partition;
  int vocab_axis;
  std::int64_t vocab;
  TensorSpace indices;  // [2, 4], never split over the vocabulary's grid axis
};

std::vector<Layout> layouts() {
  const int n = world_size();
  const Partition line = Partition::world(Shape{n});
  const Shape shape{2, 4};
  auto replicated = [&](const Partition& p) {
    return TensorSpace(p, Decomposition::balanced(shape, p.shape(), {-1, -1}));
  };
  std::vector<Layout> out;
  out.push_back({"vocabulary of 8", line, 0, 8, replicated(line)});
  out.push_back({"vocabulary of 7 (uneven)", line, 0, 7, replicated(line)});
  // Every block holds at least one row (a Decomposition has no empty parts): the smallest
  // vocabulary is one row per rank.
  if (n >= 3) out.push_back({"one row per rank", line, 0, n, replicated(line)});
  if (n == 4) {
    const Partition grid = Partition::world(Shape{2, 2});
    out.push_back({"indices split by batch, vocabulary over the other axis", grid, 1, 7,
                   TensorSpace(grid, Decomposition::balanced(shape, grid.shape(), {0, -1}))});
  }
  return out;
}

// Integer-valued indices in [0, vocab), by global index (the same at every partitioning).
DistTensor<double> indices(const TensorSpace& space, std::int64_t vocab) {
  DistTensor<double> idx(space);
  const auto g = space.global_indices();
  std::vector<double> v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) v[i] = static_cast<double>((g[i] * 5 + 3) % vocab);
  idx.local().copy_from(Tensor<double>::from_vector(space.local_shape(), v));
  return idx;
}

}  // namespace

TEST(VocabParallelEmbedding, EqualsTheOneRankLookup) {
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    nn::Embedding<double> one(l.vocab, kDim, {.seed = 9});
    nn::Embedding<double> split(l.vocab, kDim, l.partition,
                                {.seed = 9, .vocab_split_axis = l.vocab_axis});
    const TensorSpace whole = local_space(Shape{2, 4});
    Tape t1;
    Var<double> y1 = one.forward(t1, indices(whole, l.vocab));
    const auto dy1 = test::random_tensor<double>(y1.space(), 5);
    backward(t1, y1, dy1);
    Tape tape;
    Var<double> y = split.forward(tape, indices(l.indices, l.vocab));
    ASSERT_TRUE(y.space() == split.output_space(l.indices));
    test::expect_box_near(y.value(), y1.value().local().to_vector(), 0, "y");
    backward(tape, y, test::random_tensor<double>(y.space(), 5));
    // Each rank's block of rows: the one-rank gradient times the copies of y summed by the
    // AllSumReduce's adjoint (the ranks along the vocabulary axis), over the batch rows this
    // rank's group looked up.
    const double copies = static_cast<double>(l.partition.shape()[l.vocab_axis]);
    const Var<double>& w = split.weight();
    // Reference: the one-rank gradient of this rank's indices alone.
    nn::Embedding<double> mine(l.vocab, kDim, {.seed = 9});
    DistTensor<double> my_idx(local_space(l.indices.local_shape()));
    my_idx.local().copy_from(indices(l.indices, l.vocab).local());
    Tape t2;
    Var<double> y2 = mine.forward(t2, my_idx);
    DistTensor<double> dy2(y2.space());
    dy2.local().copy_from(test::random_tensor<double>(y.space(), 5).local());
    backward(t2, y2, dy2);
    const auto ref = mine.weight().grad().local().to_vector();
    const auto got = w.grad().local().to_vector();
    const auto first = w.space().local_shape().numel() > 0 ? w.space().local_offset()[0] : 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], copies * ref[static_cast<std::size_t>(first * kDim) + i], 1e-13) << i;
  }
}

TEST(VocabParallelEmbedding, AdjointAndGradientChecks) {
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    nn::Embedding<double> split(l.vocab, kDim, l.partition,
                                {.seed = 3, .vocab_split_axis = l.vocab_axis});
    const DistTensor<double> idx = indices(l.indices, l.vocab);
    distop::testing::TapeLinearisation<double> op(
        split.weight(), split.output_space(l.indices),
        [&](Tape& t) { return split.forward(t, idx); }, "VocabParallelEmbedding");
    const auto report = distop::testing::adjoint_test(op);
    EXPECT_TRUE(report.passed) << report.str();
    // The lookup is linear in the weight, which the adjoint test above checks whole: the
    // finite differences take a seeded subset of each rank's entries (every one costs two
    // collective forward passes on every rank).
    const auto r = test::random_tensor<double>(split.output_space(l.indices), 6);
    const auto check = distop::testing::gradcheck(
        [&](Tape& t) { return test::weighted_sum(t, split.forward(t, idx), r); }, {split.weight()},
        {.step = 1e-6, .tolerance = 1e-8, .max_entries = 4});
    EXPECT_TRUE(check.passed) << check.str();
  }
}

TEST(VocabParallelEmbedding, BadInputIsAnErrorOnEveryRank) {
  const int n = world_size();
  const Partition line = Partition::world(Shape{n});
  // The indices split over the ranks, one rank's box holding an index out of range.
  nn::Embedding<double> local(6, kDim, line);
  const TensorSpace batch(
      line, Decomposition::balanced(Shape{static_cast<std::int64_t>(2 * n)}, line.shape(), {0}));
  DistTensor<double> idx(batch);
  std::vector<double> v(2, 1.0);
  if (world_rank() == n - 1) v[1] = 6;
  idx.local().copy_from(Tensor<double>::from_vector(batch.local_shape(), v));
  Tape tape;
  EXPECT_NE(test::error_of([&] { local.forward(tape, idx); }).find("index 6"), std::string::npos);
  // Vocabulary-parallel with the indices split over the vocabulary's grid axis.
  if (n >= 2) {
    nn::Embedding<double> split(6, kDim, line, {.vocab_split_axis = 0});
    idx.local().fill(1.0);
    EXPECT_NE(test::error_of([&] { split.forward(tape, idx); }).find("must not be split"),
              std::string::npos);
  }
  EXPECT_THROW(nn::Embedding<double>(6, kDim, line, {.vocab_split_axis = 1}), Error);
}
