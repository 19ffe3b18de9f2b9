#include "distop/dist/partition.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "mpi_test_util.hpp"

using distop::Partition;
using distop::Shape;
using distop::test::world_rank;
using distop::test::world_size;

TEST(Partition, GridCoordinatesAndIdleRanks) {
  const int n = world_size();
  Partition p = Partition::world(Shape{1, n});
  EXPECT_TRUE(p.active());
  EXPECT_EQ(p.coords(), (std::vector<int>{0, world_rank()}));
  EXPECT_EQ(p.rank_at({0, n - 1}), n - 1);
  // A partition of the last rank only leaves the others idle.
  Partition last = Partition::world(Shape{1}, {n - 1});
  EXPECT_EQ(last.active(), world_rank() == n - 1);
  EXPECT_EQ(last.comm() == MPI_COMM_NULL, world_rank() != n - 1);
  EXPECT_EQ(last.index(), world_rank() == n - 1 ? 0 : -1);
}

TEST(Partition, ExplicitRankOrder) {
  DISTOP_REQUIRE_RANKS(4);
  // Column-major placement: grid cell (i, j) holds rank j * 2 + i.
  Partition p = Partition::world(Shape{2, 2}, {0, 2, 1, 3});
  if (world_rank() < 4) {
    const int r = world_rank();
    EXPECT_EQ(p.coords(), (std::vector<int>{r % 2, r / 2}));
    int prank = -1;
    MPI_Comm_rank(p.comm(), &prank);
    EXPECT_EQ(prank, p.index());
  }
}

TEST(Partition, SliceReshapeUnite) {
  DISTOP_REQUIRE_RANKS(4);
  Partition p = Partition::world(Shape{2, 2});
  Partition row0 = p.slice(0, 0);
  EXPECT_EQ(row0.shape(), (Shape{1, 2}));
  EXPECT_EQ(row0.ranks(), (std::vector<int>{0, 1}));
  Partition col1 = p.slice(1, 1);
  EXPECT_EQ(col1.ranks(), (std::vector<int>{1, 3}));
  Partition flat = col1.reshape(Shape{2});
  EXPECT_EQ(flat.shape(), (Shape{2}));
  EXPECT_EQ(flat.ranks(), col1.ranks());
  Partition u = row0.unite(col1);
  EXPECT_EQ(u.ranks(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(u.active(), world_rank() != 2);
}

TEST(Partition, AxesCommunicators) {
  DISTOP_REQUIRE_RANKS(4);
  Partition p = Partition::world(Shape{2, 2});
  MPI_Comm along1 = p.axes_comm({1});
  if (p.active()) {
    int size = 0, rank = -1, sum = 0;
    MPI_Comm_size(along1, &size);
    MPI_Comm_rank(along1, &rank);
    EXPECT_EQ(size, 2);
    EXPECT_EQ(rank, p.coords()[1]);
    int me = world_rank();
    MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, along1);
    EXPECT_EQ(sum, p.coords()[0] == 0 ? 0 + 1 : 2 + 3);
    EXPECT_EQ(p.axes_comm({1}), along1);  // cached
  }
}

TEST(Partition, InvariantsFailLoudlyOnEveryRank) {
  const int n = world_size();
  EXPECT_THROW(Partition::world(Shape{n + 1}), distop::Error);      // too many cells
  EXPECT_THROW(Partition::world(Shape{2}, {0, 0}), distop::Error);  // duplicate rank
  EXPECT_THROW(Partition::world(Shape{1}, {n}), distop::Error);     // no such rank
  EXPECT_THROW(Partition::world(Shape{0}), distop::Error);          // empty extent
  EXPECT_THROW(Partition::world(Shape{2, 1}, {0}), distop::Error);  // cells != ranks
  // Ranks that disagree about the grid all get the same error, none hangs.
  if (n >= 2) {
    try {
      Partition::world(Shape{world_rank() == 0 ? 1 : 2},
                       world_rank() == 0 ? std::vector<int>{0} : std::vector<int>{0, 1});
      ADD_FAILURE() << "disagreeing ranks were accepted";
    } catch (const distop::Error& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    }
  }
}

TEST(DistTensor, WrongLocalShapeOnOneRankIsAnErrorOnAll) {
  const int n = world_size();
  distop::TensorSpace space(Shape{4 * n}, Partition::world(Shape{n}));
  const auto local = world_rank() == n - 1 ? Shape{3} : space.local_shape();
  EXPECT_THROW(distop::DistTensor<float>(space, distop::Tensor<float>(local)), distop::Error);
}

// inner and norm follow the sum convention: every rank's local entries count, replicated copies
// each as its own component.
TEST(DistTensor, InnerAndNormSumEveryRanksEntries) {
  const int n = world_size();
  const Partition p = Partition::world(Shape{n});
  const distop::TensorSpace split(Shape{6}, p);
  const distop::TensorSpace replicated(p,
                                       distop::Decomposition::balanced(Shape{6}, p.shape(), {-1}));
  for (const auto& [space, copies] : {std::pair{split, 1}, std::pair{replicated, n}}) {
    SCOPED_TRACE(space.str());
    distop::DistTensor<double> a(space), b(space);
    // a_i = i + 1 and b_i = 2 at global index i: <a, b> = 2 (1 + ... + 6) = 42 per copy.
    const auto idx = space.global_indices();
    std::vector<double> av;
    for (const auto i : idx) av.push_back(static_cast<double>(i + 1));
    a.local().copy_from(distop::Tensor<double>::from_vector(space.local_shape(), av));
    b.local().fill(2.0);
    EXPECT_DOUBLE_EQ(distop::inner(a, b), 42.0 * copies);
    EXPECT_DOUBLE_EQ(distop::norm(a), std::sqrt(91.0 * copies));  // 1 + 4 + ... + 36 = 91
    distop::DistTensor<float> f(space);
    f.local().fill(0.5f);
    EXPECT_DOUBLE_EQ(distop::inner(f, f), 1.5 * copies);
    EXPECT_DOUBLE_EQ(distop::norm(f), std::sqrt(1.5 * copies));
  }
  // Tensors of different spaces: an error on every rank (the spaces are the same everywhere).
  distop::DistTensor<double> a(split), c(distop::TensorSpace(Shape{7}, p));
  EXPECT_THROW(distop::inner(a, c), distop::Error);
}

#include "box_util.hpp"
#include "distop/dist/assemble.hpp"

TEST(Assemble, RoundTripsThroughBoxesWithReplication) {
  const int n = world_size();
  // Features split over grid axis 1, copies along grid axis 0 when n is even.
  const Shape grid = n % 2 == 0 ? Shape{2, n / 2} : Shape{1, n};
  distop::TensorSpace space(Partition::world(grid),
                            distop::Decomposition::balanced(Shape{3, 10}, grid, {-1, 1}));
  distop::DistTensor<double> x(space);
  distop::test::fill_global_index(x);
  auto global = distop::assemble(x, 0);
  if (world_rank() == 0) {
    ASSERT_EQ(global.size(), 30u);
    for (std::size_t i = 0; i < global.size(); ++i) EXPECT_EQ(global[i], static_cast<double>(i));
  } else {
    EXPECT_TRUE(global.empty());
  }
  std::vector<double> values(30);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 2.0 * static_cast<double>(i);
  distop::DistTensor<double> y(space);
  distop::distribute(values, y);
  auto idx = space.global_indices();
  auto got = y.local().to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 2.0 * static_cast<double>(idx[i]));
}
