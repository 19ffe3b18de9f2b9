// Gather, Scatter, AllGather and ReduceScatter over a matrix of spaces: 1-D to 4-D tensors,
// balanced and explicit (unbalanced) blocks, replicated axes, idle ranks, float and double.
#include <gtest/gtest.h>

#include "box_util.hpp"
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

struct Case {
  const char* name;
  int ranks_needed;
  Shape tensor;
  Shape grid;
  std::vector<int> ranks;
  std::vector<int> axis_map;                      // empty: identity
  std::vector<std::vector<std::int64_t>> blocks;  // empty: balanced
  std::vector<int> gather_axes;                   // grid axes AllGather collects along
};

std::vector<Case> cases() {
  const int n = world_size();
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[i] = i;
  const std::int64_t N = n;
  return {
      {"1d", 1, {3 * N + 1}, {N}, all, {}, {}, {0}},
      {"2d_rows", 1, {2 * N + 1, 3}, {N, 1}, all, {}, {}, {0}},
      {"2d_unbalanced", 2, {9, 4}, {2, 1}, {1, 0}, {}, {{2, 7}, {4}}, {0}},
      {"3d_idle", 2, {3, 5, 2}, {1, 2, 1}, {n - 1, 0}, {}, {}, {1}},
      {"4d_grid", 4, {4, 2, 6, 3}, {2, 1, 2, 1}, {0, 1, 2, 3}, {}, {}, {0, 2}},
      {"4d_one_axis", 4, {4, 2, 6, 3}, {2, 1, 2, 1}, {3, 2, 1, 0}, {}, {}, {2}},
      {"replicated", 4, {6, 4}, {2, 2}, {0, 1, 2, 3}, {-1, 1}, {}, {1}},
  };
}

TensorSpace make(const Case& c) {
  Partition p = Partition::world(c.grid, c.ranks);
  if (!c.blocks.empty())
    return TensorSpace(p, Decomposition::blocks(c.tensor, c.grid, c.blocks, c.axis_map));
  return TensorSpace(p, Decomposition::balanced(c.tensor, c.grid, c.axis_map));
}

template <class T>
void matrix() {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    const auto s = make(c);
    const int root = world_size() - 1;
    auto g = distop::testing::adjoint_test(Gather<T>(s, root));
    EXPECT_TRUE(g.passed) << "Gather " << c.name << ": " << g.str();
    auto sc = distop::testing::adjoint_test(Scatter<T>(s, 0));
    EXPECT_TRUE(sc.passed) << "Scatter " << c.name << ": " << sc.str();
    auto ag = distop::testing::adjoint_test(AllGather<T>(s, c.gather_axes));
    EXPECT_TRUE(ag.passed) << "AllGather " << c.name << ": " << ag.str();
    auto rs = distop::testing::adjoint_test(ReduceScatter<T>(s, c.gather_axes));
    EXPECT_TRUE(rs.passed) << "ReduceScatter " << c.name << ": " << rs.str();
    ++ran;
  }
  EXPECT_GE(ran, 2);
}

}  // namespace

TEST(GatherFamilyAdjoint, MatrixDouble) { matrix<double>(); }
TEST(GatherFamilyAdjoint, MatrixFloat) { matrix<float>(); }

TEST(GatherFamily, GatherAssemblesAndAllGatherCopiesEverywhere) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    const auto s = make(c);
    DistTensor<double> x(s);
    test::fill_global_index(x);
    auto whole = Gather<double>(s, 0).apply(x).local().to_vector();
    if (world_rank() == 0) {
      ASSERT_EQ(static_cast<std::int64_t>(whole.size()), c.tensor.numel());
      for (std::size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], static_cast<double>(i));
    }
    AllGather<double> ag(s, c.gather_axes);
    auto y = ag.apply(x);
    ASSERT_TRUE(test::holds_global_index(y));
  }
}

// On a grid whose second axis replicates the tensor, AllGather along the first axis gathers within
// each replica group (the ranks sharing a coordinate on the second axis), as MPI_Allgatherv over
// the group does: every group assembles its own members' blocks, in g - 1 messages per rank, and
// ReduceScatter gives every member the sum over its own group.
TEST(GatherFamily, AllGatherStaysWithinEachReplicaGroup) {
  DISTOP_REQUIRE_RANKS(4);
  Partition p = Partition::world(Shape{2, 2}, {0, 1, 2, 3});
  const TensorSpace s(p, Decomposition::balanced(Shape{6, 3}, Shape{2, 2}, {0, -1}));
  const int group = p.coords()[1];
  DistTensor<double> x(s);
  const auto gi = s.global_indices();
  std::vector<double> v;
  for (const auto g : gi) v.push_back(static_cast<double>(g + 100 * group));
  x.local().copy_from(Tensor<double>::from_vector(s.local_shape(), v));
  AllGather<double> ag(s, {0});
  auto y = ag.apply(x).local().to_vector();
  ASSERT_EQ(y.size(), 18u);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], static_cast<double>(i + 100 * group));
  const auto f = ag.forward_stats();
  EXPECT_EQ(f.messages_received, 1);
  EXPECT_EQ(f.bytes_received, 9 * 8);
  EXPECT_EQ(f.messages_sent, 1);

  ReduceScatter<double> rs(s, {0});
  DistTensor<double> whole(rs.domain());
  whole.local().fill(1.0 + group);
  auto part = rs.apply(whole).local().to_vector();
  for (double e : part) EXPECT_EQ(e, 2.0 * (1.0 + group));
  auto rep = distop::testing::adjoint_test(rs);
  EXPECT_TRUE(rep.passed) << rep.str();
}
