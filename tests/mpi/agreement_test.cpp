// Collective constructors agree on their arguments: arguments that are wrong on some ranks only,
// or that differ between ranks, raise the same Error on every rank at construction, never a hang
// in a later collective or a silently wrong result. Also: messages beyond MPI's int count limit
// are refused at construction, from metadata alone (nothing that large is allocated).
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>

#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/batch_norm.hpp"
#include "distop/nn/linear.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/ops/sum_reduce.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::error_of;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

::testing::AssertionResult contains(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << s << "\" does not contain \"" << part << "\"";
}

// For constructors collective over a partition's ranks alone: the error on its ranks, none on
// the idle ones (which take no part).
void expect_error_on_partition(const Partition& p, const std::function<void()>& f,
                               const std::string& part) {
  if (p.active()) {
    EXPECT_TRUE(contains(error_of(f), part));
  } else {
    EXPECT_NO_THROW(f());
  }
}

// Explicit blocks of an 8-entry vector over two ranks: {3, 5} on rank 0, {5, 3} elsewhere.
TensorSpace blocks_differing_by_rank() {
  const std::vector<std::int64_t> blocks =
      world_rank() == 0 ? std::vector<std::int64_t>{3, 5} : std::vector<std::int64_t>{5, 3};
  return TensorSpace(Partition::world(Shape{2}, {0, 1}),
                     Decomposition::blocks(Shape{8}, Shape{2}, {blocks}));
}

}  // namespace

TEST(Agreement, AnInvalidGridOnOneRankIsAnErrorOnAll) {
  DISTOP_REQUIRE_RANKS(2);
  // Rank 0 asks for an empty grid axis, the others for a valid grid.
  const auto msg = error_of([] { Partition::world(Shape{world_rank() == 0 ? 0 : 2}); });
  EXPECT_TRUE(contains(msg, "grid extents must be at least 1")) << msg;
}

TEST(Agreement, SliceAndReshapeWithBadArgumentsOnOneRankAreErrorsOnAll) {
  DISTOP_REQUIRE_RANKS(2);
  const Partition p = Partition::world(Shape{2, 1}, {0, 1});
  auto msg = error_of([&] { p.slice(world_rank() == 0 ? 5 : 0, 0); });
  EXPECT_TRUE(contains(msg, "axis 5 out of range")) << msg;
  msg = error_of([&] { p.reshape(world_rank() == 0 ? Shape{3} : Shape{1, 2}); });
  EXPECT_TRUE(contains(msg, "cannot arrange the 2 ranks")) << msg;
  // The partition is still usable afterwards: nothing was left half-made.
  EXPECT_EQ(p.reshape(Shape{1, 2}).shape(), (Shape{1, 2}));
}

TEST(Agreement, AllSumReduceOverAxesThatDifferBetweenRanksIsAnError) {
  DISTOP_REQUIRE_RANKS(2);
  const TensorSpace replicated(Partition::world(Shape{2, 1}, {0, 1}),
                               Decomposition::balanced(Shape{4}, Shape{2, 1}, {-1}));
  // An axis out of range on rank 0 only.
  expect_error_on_partition(
      replicated.partition(),
      [&] {
        AllSumReduce<double>(replicated,
                             world_rank() == 0 ? std::vector<int>{3} : std::vector<int>{0});
      },
      "grid axis 3 out of range");
  // Valid axes that differ: the sums would otherwise be over different groups on each rank.
  expect_error_on_partition(
      replicated.partition(),
      [&] {
        AllSumReduce<double>(replicated,
                             world_rank() == 0 ? std::vector<int>{0} : std::vector<int>{1});
      },
      "another rank passed different arguments");
}

TEST(Agreement, ExplicitBlocksThatDifferBetweenRanksAreAnError) {
  DISTOP_REQUIRE_RANKS(2);
  const TensorSpace mixed = blocks_differing_by_rank();
  const TensorSpace root(Shape{8}, Partition::world(Shape{1}, {0}));
  auto msg = error_of([&] { Repartition<double>(mixed, root); });
  EXPECT_TRUE(contains(msg, "another rank passed different arguments")) << msg;
  msg = error_of([&] { Gather<float>{mixed}; });
  EXPECT_TRUE(contains(msg, "another rank passed different arguments")) << msg;
  expect_error_on_partition(
      mixed.partition(), [&] { AllGather<double>(mixed, {0}); },
      "another rank passed different arguments");
  msg = error_of([&] { Broadcast<double>(mixed, Partition::world(Shape{2}, {0, 1})); });
  EXPECT_TRUE(contains(msg, "another rank passed different arguments")) << msg;
  msg = error_of([&] { SumReduce<double>(Partition::world(Shape{2}, {0, 1}), mixed); });
  EXPECT_TRUE(contains(msg, "another rank passed different arguments")) << msg;
}

TEST(Agreement, BroadcastBetweenPartitionsThatDifferBetweenRanksIsAnError) {
  DISTOP_REQUIRE_RANKS(2);
  const Partition one = Partition::world(Shape{1}, {0});
  const Partition two = Partition::world(Shape{2}, {0, 1});
  const Partition reversed = Partition::world(Shape{2}, {1, 0});
  const auto msg = error_of([&] { BroadcastPlan(one, world_rank() == 0 ? two : reversed); });
  EXPECT_TRUE(contains(msg, "another rank passed different arguments")) << msg;
}

TEST(Agreement, MessagesBeyondMpisIntCountAreRefusedAtConstruction) {
  DISTOP_REQUIRE_RANKS(2);
  // A vector of 2^32 + 2 floats over two ranks: each block holds more than INT_MAX entries.
  const std::int64_t n = 2 * std::int64_t{INT_MAX} + 4;
  const TensorSpace split(Shape{n}, Partition::world(Shape{2}, {0, 1}));
  auto msg = error_of([&] {
    Repartition<float>(split, TensorSpace(Shape{n}, Partition::world(Shape{2}, {1, 0})));
  });
  EXPECT_TRUE(contains(msg, "exceeds MPI's int count limit")) << msg;
  // A gather whose big block travels from one rank only: every rank raises the error.
  const TensorSpace uneven(Partition::world(Shape{2}, {0, 1}),
                           Decomposition::blocks(Shape{n}, Shape{2}, {{1, n - 1}}));
  msg = error_of([&] { Gather<float>(uneven, 0); });
  EXPECT_TRUE(contains(msg, "exceeds MPI's int count limit")) << msg;
  const TensorSpace whole(Shape{n}, Partition::world(Shape{1}, {0}));
  msg = error_of([&] { Broadcast<float>(whole, Partition::world(Shape{2}, {0, 1})); });
  EXPECT_TRUE(contains(msg, "exceeds MPI's int count limit")) << msg;
  const TensorSpace replicated(Partition::world(Shape{2}, {0, 1}),
                               Decomposition::balanced(Shape{n}, Shape{2}, {-1}));
  expect_error_on_partition(
      replicated.partition(), [&] { AllSumReduce<float>(replicated, {0}); },
      "exceeds MPI's int count limit");
  // Just under the limit every one of them is accepted.
  const std::int64_t fits = INT_MAX;
  EXPECT_NO_THROW(
      Gather<float>(TensorSpace(Partition::world(Shape{2}, {0, 1}),
                                Decomposition::blocks(Shape{fits + 1}, Shape{2}, {{1, fits}})),
                    0));
}

// A layer's input held by ranks outside the layer's partition: every rank raises the error (it was
// raised on those ranks alone, leaving the others to wait in the next collective).
TEST(Agreement, LayerInputOutsideTheLayersPartitionIsAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const Partition both = Partition::world(Shape{2, 1}, {0, 1});
  nn::Linear<double> fc(3, 2, Partition::world(Shape{1, 1}, {0}), {.seed = 1});
  Tape tape;
  Var<double> x(DistTensor<double>(TensorSpace(Shape{4, 3}, both)));
  auto msg = error_of([&] { fc.forward(tape, x); });
  EXPECT_TRUE(contains(msg, "rank 1 holds a box of the input")) << msg;
  nn::BatchNorm<double> bn(3, Partition::world(Shape{1, 1}, {0}));
  msg = error_of([&] { bn.forward(tape, x); });
  EXPECT_TRUE(contains(msg, "rank 1 holds a box of the input")) << msg;
}

// Partitions name parent ranks: equal grids and rank lists under parents that order the processes
// differently are different partitions; made separately from one communicator, they are the same.
TEST(Agreement, PartitionsUnderDifferentlyOrderedParentsDiffer) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  MPI_Comm reversed = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, n - 1 - world_rank(), &reversed);
  {
    const Partition a = Partition::world(Shape{n});
    const Partition b = Partition::world(Shape{n});
    const Partition r(reversed, Shape{n});
    EXPECT_TRUE(a.same_as(b));
    EXPECT_FALSE(a.same_as(r));
    EXPECT_FALSE(TensorSpace(Shape{2 * n}, a) == TensorSpace(Shape{2 * n}, r));
  }
  MPI_Comm_free(&reversed);
}
