// TensorSpace equality: spaces holding the same boxes on the same processes are equal and hash
// alike on every rank, however they were derived (partitions built separately over the same ranks
// and grid, explicit blocks against balanced ones, an axis split over a grid axis of extent 1
// against the unsplit axis); spaces that differ in one box, or in the ranks that hold the boxes,
// are not.
#include "distop/dist/tensor_space.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

// Whether `a` and `b` are equal both ways, and their fingerprints agree on every rank and with
// each other exactly when they are.
void expect_equal(const TensorSpace& a, const TensorSpace& b, bool equal) {
  SCOPED_TRACE(a.str() + " against " + b.str());
  EXPECT_EQ(a == b, equal);
  EXPECT_EQ(b == a, equal);
  const std::uint64_t f[2] = {a.fingerprint(), b.fingerprint()};
  std::uint64_t lo[2], hi[2];
  MPI_Allreduce(f, lo, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(f, hi, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo[0], hi[0]) << "a's fingerprint differs between ranks";
  EXPECT_EQ(lo[1], hi[1]) << "b's fingerprint differs between ranks";
  if (equal) {
    EXPECT_EQ(f[0], f[1]);
  } else {
    EXPECT_NE(f[0], f[1]);
  }
}

}  // namespace

TEST(TensorSpace, EqualHoweverDerived) {
  const int n = world_size();
  const Shape g{9, 5};
  const Partition p = Partition::world(Shape{n});
  const TensorSpace a(p, Decomposition::balanced(g, p.shape(), {0, -1}));
  // Another partition over the same ranks and grid, built separately.
  const Partition q = Partition::world(Shape{n});
  const auto b = balanced_bounds(9, n);
  std::vector<std::int64_t> parts;
  for (int i = 0; i < n; ++i) parts.push_back(b[i + 1] - b[i]);
  expect_equal(a, TensorSpace(q, Decomposition::blocks(g, q.shape(), {parts, {5}}, {0, -1})), true);
  // The features over a grid axis of extent 1 are the features unsplit.
  const Partition r = Partition::world(Shape{n, 1});
  expect_equal(TensorSpace(r, Decomposition::balanced(g, r.shape(), {0, 1})),
               TensorSpace(r, Decomposition::balanced(g, r.shape(), {0, -1})), true);
  // At one rank the batch over the grid's only axis is the batch unsplit (which is how nn::matmul
  // derives its output); at more it is not.
  expect_equal(a, TensorSpace(p, Decomposition::balanced(g, p.shape(), {-1, -1})), n == 1);
  // Replicated over the whole grid, however the grid axes are named.
  const Partition s = Partition::world(Shape{1, n});
  expect_equal(TensorSpace(s, Decomposition::balanced(g, s.shape(), {0, -1})),
               TensorSpace(s, Decomposition::balanced(g, s.shape(), {-1, -1})), true);
}

TEST(TensorSpace, UnequalWhenOneBoxDiffers) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const Shape g{9, 5};
  const Partition p = Partition::world(Shape{n});
  const TensorSpace a(p, Decomposition::balanced(g, p.shape(), {0, -1}));
  // One row moved from the last rank to the first.
  const auto b = balanced_bounds(9, n);
  std::vector<std::int64_t> parts;
  for (int i = 0; i < n; ++i) parts.push_back(b[i + 1] - b[i]);
  parts.front() += 1;
  parts.back() -= 1;
  expect_equal(a, TensorSpace(p, Decomposition::blocks(g, p.shape(), {parts, {5}}, {0, -1})),
               false);
  // The same boxes on other ranks: the grid's ranks reversed.
  std::vector<int> reversed(static_cast<std::size_t>(n));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  const Partition q = Partition::world(Shape{n}, reversed);
  expect_equal(a, TensorSpace(q, Decomposition::balanced(g, q.shape(), {0, -1})), false);
  // The features split instead of the batch, and the same blocks on a grid of another shape.
  expect_equal(a, TensorSpace(p, Decomposition::balanced(g, p.shape(), {-1, 0})), false);
  const Partition r = Partition::world(Shape{n, 1});
  expect_equal(a, TensorSpace(r, Decomposition::balanced(g, r.shape(), {0, -1})), false);
}
