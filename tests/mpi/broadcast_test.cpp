// Broadcast and SumReduce: dot-product adjoint tests over a matrix of partitions, the sequential
// definition (every destination holds its source's box), and errors.
#include "distop/ops/broadcast.hpp"

#include <gtest/gtest.h>

#include "box_util.hpp"
#include "distop/ops/sum_reduce.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

struct Case {
  const char* name;
  int ranks_needed;
  Shape src_grid;
  std::vector<int> src_ranks;
  Shape dst_grid;
  std::vector<int> dst_ranks;
  Shape tensor;
  std::vector<std::vector<std::int64_t>> blocks;  // unbalanced source split, if not empty
};

std::vector<Case> cases() {
  return {
      {"1d_one_to_all", 2, {1}, {0}, {2}, {0, 1}, {7}, {}},
      {"same_rank_copy", 1, {1}, {0}, {1}, {0}, {5}, {}},
      {"disjoint", 2, {1}, {1}, {1}, {0}, {6}, {}},
      {"idle_ranks", 3, {1}, {2}, {2}, {0, 2}, {12}, {}},
      {"2d_row_to_grid", 4, {1, 2}, {0, 1}, {2, 2}, {0, 1, 2, 3}, {5, 6}, {}},
      {"2d_unbalanced", 4, {1, 2}, {2, 3}, {2, 2}, {3, 1, 0, 2}, {4, 9}, {{4}, {2, 7}}},
      {"3d", 4, {1, 1, 2}, {0, 1}, {2, 1, 2}, {0, 1, 2, 3}, {3, 4, 5}, {}},
      {"4d", 4, {1, 1, 1, 2}, {2, 3}, {1, 2, 1, 2}, {0, 1, 2, 3}, {2, 3, 4, 6}, {}},
      {"left_padded", 4, {2}, {0, 1}, {2, 2}, {0, 1, 2, 3}, {8}, {}},
      {"partial_overlap_3", 3, {1}, {1}, {3}, {2, 1, 0}, {10}, {}},
  };
}

TensorSpace source_space(const Case& c) {
  Partition p = Partition::world(c.src_grid, c.src_ranks);
  if (!c.blocks.empty())
    return TensorSpace(p, Decomposition::blocks(c.tensor, c.src_grid, c.blocks));
  return TensorSpace(c.tensor, p);
}

template <class T>
void run_adjoint_matrix() {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto src = source_space(c);
    Broadcast<T> b(src, Partition::world(c.dst_grid, c.dst_ranks));
    auto rb = distop::testing::adjoint_test(b);
    EXPECT_TRUE(rb.passed) << "Broadcast " << c.name << ": " << rb.str();
    SumReduce<T> s(b.plan(), src);
    auto rs = distop::testing::adjoint_test(s);
    EXPECT_TRUE(rs.passed) << "SumReduce " << c.name << ": " << rs.str();
    EXPECT_EQ(s.domain(), b.range());
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

}  // namespace

TEST(BroadcastAdjoint, MatrixDouble) { run_adjoint_matrix<double>(); }
TEST(BroadcastAdjoint, MatrixFloat) { run_adjoint_matrix<float>(); }

TEST(Broadcast, EveryDestinationHoldsItsSourceBox) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto src = source_space(c);
    Broadcast<double> b(src, Partition::world(c.dst_grid, c.dst_ranks));
    DistTensor<double> x(src);
    test::fill_global_index(x);
    auto y = b.apply(x);
    // The range space's boxes are those of the sources; their global indices are what arrives.
    ASSERT_TRUE(test::holds_global_index(y));
  }
}

// From 64 KiB on, a root that keeps a copy writes it while the broadcast is in flight; every rank
// of the group must then take the same (nonblocking) form. Sizes either side of the threshold,
// through the forward (broadcast) and the adjoint (reduction) paths.
TEST(Broadcast, BoxesEitherSideOf64KiBFromARootThatKeepsACopy) {
  const int n = world_size();
  for (const std::int64_t count : {std::int64_t{8191}, std::int64_t{8192}, std::int64_t{20000}}) {
    SCOPED_TRACE(count);
    TensorSpace src(Shape{count}, Partition::world(Shape{1}, {0}));
    Broadcast<double> b(src, Partition::world(Shape{n}));
    DistTensor<double> x(src);
    test::fill_global_index(x);
    auto y = b.apply(x);
    ASSERT_TRUE(test::holds_global_index(y));
    auto back = b.apply_adjoint(y);
    ASSERT_TRUE(test::holds_global_index(back, n));
  }
}

TEST(SumReduce, SumsTheCopiesOfEachGroup) {
  DISTOP_REQUIRE_RANKS(4);
  // [2, 2] grid reduced onto its first row: each row-0 rank receives the sum of its column.
  Partition grid = Partition::world(Shape{2, 2});
  Partition row = Partition::world(Shape{1, 2}, {0, 1});
  TensorSpace out(Shape{3, 4}, row);
  SumReduce<double> s(grid, out);
  DistTensor<double> x(s.domain());
  test::fill_global_index(x);
  auto y = s.apply(x);
  EXPECT_TRUE(test::holds_global_index(y, 2.0));
}

TEST(Broadcast, IncompatibleGridsAreErrors) {
  DISTOP_REQUIRE_RANKS(4);
  TensorSpace src(Shape{6, 6}, Partition::world(Shape{2, 1}, {0, 1}));
  // Source extent 2 against destination extent 4 on axis 0.
  EXPECT_THROW(Broadcast<float>(src, Partition::world(Shape{4, 1})), Error);
  // A source grid with more axes than the destination.
  TensorSpace src3(Shape{2, 2, 2}, Partition::world(Shape{1, 1, 2}, {0, 1}));
  EXPECT_THROW(Broadcast<float>(src3, Partition::world(Shape{2, 2})), Error);
}

TEST(Broadcast, TensorOfAnotherSpaceIsAnError) {
  const int n = world_size();
  TensorSpace src(Shape{8}, Partition::world(Shape{1}, {0}));
  Broadcast<double> b(src, Partition::world(Shape{n}));
  DistTensor<double> wrong(TensorSpace(Shape{9}, Partition::world(Shape{1}, {0})));
  DistTensor<double> y(b.range());
  try {
    b.forward(wrong, y);
    ADD_FAILURE() << "accepted a tensor of another space";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Broadcast.forward"), std::string::npos) << e.what();
  }
  // A domain tensor where the range tensor is expected first. At 1 rank the domain and the range
  // hold the same box on the same process: they are one space, and the tensor fits both.
  DistTensor<double> x(src);
  if (n > 1) {
    EXPECT_THROW(b.adjoint(x, x), Error);
  } else {
    EXPECT_TRUE(src == b.range());
  }
}

TEST(Broadcast, CommunicationAccountingMatchesTheClosedForm) {
  const int n = world_size();
  // 10 doubles from rank 0 to every rank: the root sends n - 1 messages of 80 bytes.
  TensorSpace src(Shape{10}, Partition::world(Shape{1}, {0}));
  Broadcast<double> b(src, Partition::world(Shape{n}));
  const auto f = b.forward_stats();
  const auto a = b.adjoint_stats();
  if (world_rank() == 0) {
    EXPECT_EQ(f, (CommStats{n - 1, 80 * (n - 1), 0, 0}));
    EXPECT_EQ(a, (CommStats{0, 0, n - 1, 80 * (n - 1)}));
  } else {
    EXPECT_EQ(f, (CommStats{0, 0, 1, 80}));
    EXPECT_EQ(a, (CommStats{1, 80, 0, 0}));
  }
  SumReduce<double> s(b.plan(), src);
  EXPECT_EQ(s.forward_stats(), a);
  EXPECT_EQ(s.adjoint_stats(), f);
}
