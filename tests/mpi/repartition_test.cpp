// Repartition, Gather, Scatter, AllGather, ReduceScatter: adjoint tests over a matrix of spaces,
// the sequential definition (every entry lands where its global index says), the round trip
// through Gather, communication volumes, and errors.
#include <gtest/gtest.h>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/nn/activation.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/scatter.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

struct SpaceSpec {
  Shape grid;
  std::vector<int> ranks;
  std::vector<int> axis_map;                      // empty: identity
  std::vector<std::vector<std::int64_t>> blocks;  // empty: balanced
};

struct Case {
  const char* name;
  int ranks_needed;
  Shape tensor;
  SpaceSpec src, dst;
};

TensorSpace make(const Shape& tensor, const SpaceSpec& s) {
  Partition p = Partition::world(s.grid, s.ranks);
  if (!s.blocks.empty())
    return TensorSpace(p, Decomposition::blocks(tensor, s.grid, s.blocks, s.axis_map));
  return TensorSpace(p, Decomposition::balanced(tensor, s.grid, s.axis_map));
}

std::vector<Case> cases() {
  const int n = world_size();
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[i] = i;
  const std::int64_t N = n;
  return {
      {"1d_one_to_all", 1, {7 + N}, {{1}, {0}, {}, {}}, {{N}, all, {}, {}}},
      {"2d_rows_to_columns", 1, {5 + N, 6 + N}, {{N, 1}, all, {}, {}}, {{1, N}, all, {}, {}}},
      {"disjoint", 2, {9}, {{1}, {0}, {}, {}}, {{1}, {1}, {}, {}}},
      {"overlapping_idle", 4, {11, 3}, {{2, 1}, {0, 1}, {}, {}}, {{3, 1}, {3, 2, 1}, {}, {}}},
      {"unbalanced_source", 3, {9}, {{3}, {2, 0, 1}, {}, {{1, 6, 2}}}, {{2}, {0, 1}, {}, {}}},
      {"3d", 4, {3, 4, 5}, {{1, 2, 2}, {0, 1, 2, 3}, {}, {}}, {{2, 2, 1}, {3, 2, 1, 0}, {}, {}}},
      {"4d",
       4,
       {2, 3, 4, 5},
       {{1, 1, 2, 2}, {0, 1, 2, 3}, {}, {}},
       {{2, 1, 1, 2}, {0, 1, 2, 3}, {}, {}}},
      {"replicated_source",
       4,
       {4, 6},
       {{2, 2}, {0, 1, 2, 3}, {-1, 1}, {}},
       {{2, 2}, {0, 1, 2, 3}, {}, {}}},
      {"replicated_destination",
       2,
       {4, 6},
       {{2, 1}, {0, 1}, {}, {}},
       {{1, 2}, {1, 0}, {-1, -1}, {}}},
      {"identical", 1, {6 + N}, {{N}, all, {}, {}}, {{N}, all, {}, {}}},
  };
}

template <class T>
void adjoint_matrix() {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    Repartition<T> r(make(c.tensor, c.src), make(c.tensor, c.dst));
    auto rep = distop::testing::adjoint_test(r);
    EXPECT_TRUE(rep.passed) << c.name << ": " << rep.str();
    ++ran;
  }
  EXPECT_GE(ran, 3);
}

// Sum over all ranks.
std::int64_t total(std::int64_t v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

}  // namespace

TEST(RepartitionAdjoint, MatrixDouble) { adjoint_matrix<double>(); }
TEST(RepartitionAdjoint, MatrixFloat) { adjoint_matrix<float>(); }

TEST(Repartition, EveryEntryLandsAtItsGlobalIndexAndGathersBack) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto src = make(c.tensor, c.src);
    auto dst = make(c.tensor, c.dst);
    Repartition<double> r(src, dst);
    DistTensor<double> x(src);
    test::fill_global_index(x);
    auto y = r.apply(x);
    ASSERT_TRUE(test::holds_global_index(y));
    Gather<double> g(dst, 0);
    auto whole = g.apply(y).local().to_vector();
    if (world_rank() == 0) {
      ASSERT_EQ(static_cast<std::int64_t>(whole.size()), c.tensor.numel());
      for (std::size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], static_cast<double>(i));
    }
  }
}

TEST(Repartition, MovesExactlyTheEntriesWhoseOwnerChanges) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto src = make(c.tensor, c.src);
    auto dst = make(c.tensor, c.dst);
    Repartition<float> r(src, dst);
    // Closed form: every destination entry not already held by the source box this rank reads
    // from itself (its own box on a shared partition; between partitions, only a canonical
    // replica's).
    std::int64_t expected = 0;
    if (dst.partition().active() && !(src == dst)) {
      const Box mine_dst{dst.local_offset(), dst.local_shape().extents()};
      std::int64_t kept = 0;
      const auto& sp = src.partition();
      if (sp.active()) {
        bool reads_itself = sp.same_as(dst.partition());
        if (!reads_itself) {
          reads_itself = true;
          for (int g = 0; g < sp.dim(); ++g)
            if (src.decomposition().replicates(g) && sp.coords()[g] != 0) reads_itself = false;
        }
        if (reads_itself)
          kept = Box{src.local_offset(), src.local_shape().extents()}.intersect(mine_dst).numel();
      }
      expected = mine_dst.numel() - kept;
    }
    const auto f = r.forward_stats();
    EXPECT_EQ(f.bytes_received, expected * 4);
    EXPECT_EQ(total(f.bytes_sent), total(f.bytes_received));
    EXPECT_EQ(total(f.messages_sent), total(f.messages_received));
    const auto a = r.adjoint_stats();
    EXPECT_EQ(a.bytes_sent, f.bytes_received);
    EXPECT_EQ(a.messages_received, f.messages_sent);
  }
}

// Identical spaces, split or replicated (each replica keeping its own copy: the identity, as the
// rule of the shared partition below gives), pass x's storage through.
TEST(Repartition, IdenticalSpacesPassThroughWithoutACopy) {
  const int n = world_size();
  const Partition p = Partition::world(Shape{n});
  for (const auto& s : {TensorSpace(Shape{4 * n}, p),
                        TensorSpace(p, Decomposition::balanced(Shape{5}, Shape{n}, {-1}))}) {
    SCOPED_TRACE(s.str());
    Repartition<double> r(s, s);
    DistTensor<double> x(s);
    x.local().fill(1.0 + world_rank());
    auto y = DistTensor<double>::uninitialized(s);
    r.forward(x, y);
    EXPECT_EQ(y.data(), x.data());
    EXPECT_EQ(r.forward_stats(), CommStats{});
  }
}

// On one partition, each replica serves the ranks that share its coordinate on the replicating
// axis: a replicated tensor split along that axis is sliced from each rank's own copy, no message,
// and the adjoint gives each copy the gradient of its own slice. Replicas differ here, so reading
// the canonical copy instead would show.
TEST(Repartition, OnOnePartitionEachReplicaServesItsOwnCoordinate) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const int me = world_rank();
  Partition p = Partition::world(Shape{n});
  TensorSpace whole(p, Decomposition::balanced(Shape{2 * n}, Shape{n}, {-1}));
  TensorSpace split(p, Decomposition::balanced(Shape{2 * n}, Shape{n}, {0}));
  Repartition<double> r(whole, split);
  DistTensor<double> x(whole);
  x.local().fill(1.0 + me);
  auto y = DistTensor<double>::uninitialized(split);
  r.forward(x, y);
  for (double v : y.local().to_vector()) EXPECT_EQ(v, 1.0 + me);
  EXPECT_EQ(r.forward_stats(), CommStats{});
  DistTensor<double> dy(split);
  dy.local().fill(1.0);
  auto dx = DistTensor<double>::uninitialized(whole);
  r.adjoint(dy, dx);
  const auto g = dx.local().to_vector();
  for (int i = 0; i < 2 * n; ++i) EXPECT_EQ(g[i], i / 2 == me ? 1.0 : 0.0) << i;
  auto rep = distop::testing::adjoint_test(r);
  EXPECT_TRUE(rep.passed) << rep.str();
}

// Between two partitions a replicated source is read from its canonical copy (coordinate 0), and
// the adjoint gives the other copies zero.
TEST(Repartition, BetweenPartitionsTheCanonicalReplicaIsRead) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const int me = world_rank();
  TensorSpace whole(Partition::world(Shape{n}), Decomposition::balanced(Shape{3}, Shape{n}, {-1}));
  TensorSpace on_last(Shape{3}, Partition::world(Shape{1}, {n - 1}));
  Repartition<double> r(whole, on_last);
  DistTensor<double> x(whole);
  x.local().fill(1.0 + me);
  auto y = r.apply(x);
  for (double v : y.local().to_vector()) EXPECT_EQ(v, 1.0);
  DistTensor<double> dy(on_last);
  dy.local().fill(2.0);
  auto dx = r.apply_adjoint(dy);
  for (double v : dx.local().to_vector()) EXPECT_EQ(v, me == 0 ? 2.0 : 0.0);
}

// On the tape, the pass-through's adjoint hands back y's gradient itself; x must get a copy, or
// what x's other uses add to its gradient later would show up in y's.
TEST(Repartition, PassThroughOnTheTapeKeepsTheGradientsApart) {
  const int n = world_size();
  TensorSpace s(Shape{4 * n}, Partition::world(Shape{n}));
  auto r = std::make_shared<const Repartition<double>>(s, s);
  DistTensor<double> xv(s);
  xv.local().fill(1.0);
  Var<double> x(xv, true);
  Tape tape;
  Var<double> a = nn::relu(tape, x);  // recorded first, so its adjoint runs last
  Var<double> y = apply<double>(tape, r, x);
  a.grad().local().fill(10.0);
  y.grad().local().fill(1.0);
  tape.backward();
  for (double v : x.grad().local().to_vector()) EXPECT_EQ(v, 11.0);
  for (double v : y.grad().local().to_vector()) EXPECT_EQ(v, 1.0);
}

TEST(GatherScatter, AdjointsAndData) {
  const int n = world_size();
  const int root = n - 1;
  TensorSpace split(Partition::world(Shape{n, 1}),
                    Decomposition::balanced(Shape{2 * n + 1, 3}, Shape{n, 1}));
  Gather<double> g(split, root);
  EXPECT_TRUE(distop::testing::adjoint_test(g).passed);
  Scatter<float> s(split, root);
  EXPECT_TRUE(distop::testing::adjoint_test(s).passed);
  Scatter<double> sd(split, root);
  DistTensor<double> whole(sd.domain());
  test::fill_global_index(whole);
  auto boxes = sd.apply(whole);
  EXPECT_TRUE(test::holds_global_index(boxes));
  // Gathering onto the root moves everything the root does not hold itself.
  const auto f = g.forward_stats();
  const std::int64_t others = (2 * n + 1) * 3 - split.local_shape().numel();
  EXPECT_EQ(f.bytes_received, world_rank() == root ? others * 8 : 0);
}

TEST(AllGatherReduceScatter, AdjointsAndData) {
  const int n = world_size();
  // Rows split over grid axis 0; gathered along it, every rank holds everything.
  TensorSpace split(Shape{2 * n + 1, 3}, Partition::world(Shape{n, 1}));
  AllGather<double> ag(split, {0});
  EXPECT_TRUE(distop::testing::adjoint_test(ag).passed);
  ReduceScatter<double> rs(split, {0});
  EXPECT_TRUE(distop::testing::adjoint_test(rs).passed);
  ReduceScatter<float> rsf(split, {0});
  EXPECT_TRUE(distop::testing::adjoint_test(rsf).passed);
  EXPECT_EQ(rs.domain(), ag.range());
  DistTensor<double> x(split);
  test::fill_global_index(x);
  auto y = ag.apply(x);
  const auto all = y.local().to_vector();
  ASSERT_EQ(static_cast<std::int64_t>(all.size()), (2 * n + 1) * 3);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<double>(i));
  // Reduce-scatter of n identical copies gives n times each block.
  auto z = rs.apply(y);
  EXPECT_TRUE(test::holds_global_index(z, n));
}

TEST(Repartition, BadSpacesAreErrorsOnEveryRank) {
  const int n = world_size();
  TensorSpace a(Shape{4 * n}, Partition::world(Shape{n}));
  TensorSpace b(Shape{4 * n + 1}, Partition::world(Shape{n}));
  EXPECT_THROW(Repartition<float>(a, b), Error);
  EXPECT_THROW(AllGather<float>(a, {1}), Error);
  // More parts than elements along an axis.
  if (n > 1) {
    EXPECT_THROW(TensorSpace(Shape{n - 1}, Partition::world(Shape{n})), Error);
  }
  DistTensor<float> wrong(b);
  Repartition<float> r(a, a);
  DistTensor<float> y(a);
  EXPECT_THROW(r.forward(wrong, y), Error);
}
