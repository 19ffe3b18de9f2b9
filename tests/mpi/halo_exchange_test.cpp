// HaloExchange: dot-product adjoint tests over a matrix of partitions, the sequential definition
// (every ghost holds the entry it mirrors; a convolution computed from the padded blocks equals
// the sequential one; the adjoint adds every ghost into its owner), communication accounting and
// construction errors.
#include "distop/ops/halo_exchange.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

struct Case {
  const char* name;
  int ranks_needed;
  Shape grid;
  std::vector<int> ranks;
  Shape tensor;
  std::vector<std::vector<std::int64_t>> blocks;  // unbalanced split, if not empty
  std::vector<ConvWindow> windows;                // the widths a convolution needs, or else
  HaloSpec spec;                                  // explicit widths
};

std::vector<Case> cases() {
  return {
      {"1d_conv", 2, {2}, {}, {10}, {}, {{3, 1, 1, 1}}, {}},
      {"1d_boundary_one_rank", 1, {1}, {}, {6}, {}, {}, {{{2, 1}}}},
      {"2d_boundary_one_rank", 1, {1, 1}, {}, {3, 4}, {}, {}, {{{1, 1}}, {{0, 2}}}},
      {"2d_boundary_corners", 2, {2, 1}, {1, 0}, {5, 4}, {}, {}, {{{1, 1}, {2, 1}}, {{1, 1}}}},
      {"1d_idle_unbalanced", 3, {2}, {2, 0}, {9}, {{6, 3}}, {}, {{{1, 2}, {3, 1}}}},
      {"3d_stride_idle",
       3,
       {1, 3, 1},
       {},
       {2, 8, 3},
       {},
       {{1, 1, 0, 1}, {3, 2, 1, 1}, {3, 1, 1, 1}},
       {}},
      {"2d_conv_corners", 4, {2, 2}, {}, {7, 9}, {}, {{3, 1, 1, 1}, {5, 1, 2, 1}}, {}},
      {"2d_unbalanced_permuted",
       4,
       {2, 2},
       {3, 1, 0, 2},
       {7, 7},
       {{2, 5}, {4, 3}},
       {},
       {{{0, 2}, {1, 0}}, {{1, 3}, {2, 1}}}},
      {"4d_conv_dilated",
       4,
       {2, 1, 2, 1},
       {},
       {4, 3, 5, 6},
       {},
       {{3, 1, 1, 1}, {3, 1, 1, 1}, {3, 1, 2, 2}, {2, 2, 0, 1}},
       {}},
      {"4d_idle_boundary",
       4,
       {1, 1, 1, 3},
       {3, 1, 2},
       {2, 2, 3, 7},
       {},
       {},
       {{{1, 0}}, {{0, 0}}, {{0, 0}}, {{2, 1}, {1, 1}, {1, 2}}}},
  };
}

TensorSpace interior_space(const Case& c) {
  Partition p = Partition::world(c.grid, c.ranks);
  if (!c.blocks.empty()) return TensorSpace(p, Decomposition::blocks(c.tensor, c.grid, c.blocks));
  return TensorSpace(c.tensor, p);
}

template <class T>
HaloExchange<T> make_op(const Case& c) {
  auto interior = interior_space(c);
  if (!c.windows.empty()) return HaloExchange<T>(interior, c.windows);
  return HaloExchange<T>(interior, c.spec);
}

// Calls f(index) for every multi-index of `shape`, in row-major order.
void for_each_index(const Shape& shape,
                    const std::function<void(const std::vector<std::int64_t>&)>& f) {
  if (shape.numel() == 0) return;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank()), 0);
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    f(idx);
    for (int a = shape.rank() - 1; a >= 0; --a) {
      if (++idx[a] < shape[a]) break;
      idx[a] = 0;
    }
  }
}

// The row-major index of `g` in `shape`, or -1 when g lies outside it.
std::int64_t linear(const Shape& shape, const std::vector<std::int64_t>& g) {
  std::int64_t i = 0;
  for (int a = 0; a < shape.rank(); ++a) {
    if (g[a] < 0 || g[a] >= shape[a]) return -1;
    i = i * shape[a] + g[a];
  }
  return i;
}

// The global coordinates of entry `local` of the padded block at grid coordinates `coords`.
std::vector<std::int64_t> global_of(const HaloExchange<double>& op, const std::vector<int>& coords,
                                    const std::vector<std::int64_t>& local) {
  const auto& interior = op.interior_space();
  const auto offset = interior.decomposition().local_offset(coords);
  std::vector<std::int64_t> g(local.size());
  for (std::size_t a = 0; a < local.size(); ++a)
    g[a] = offset[a] - op.spec()[a][coords[a]].left + local[a];
  return g;
}

bool in_interior(const Box& box, const std::vector<std::int64_t>& i) {
  for (int a = 0; a < box.rank(); ++a)
    if (i[a] < box.offset[a] || i[a] >= box.offset[a] + box.extent[a]) return false;
  return true;
}

// Interior entries hold their global index + 1; ghosts hold `ghost`.
DistTensor<double> index_tensor(const HaloExchange<double>& op, double ghost) {
  const auto& space = op.domain();
  std::vector<double> v;
  if (space.partition().active()) {
    const auto& coords = space.partition().coords();
    for_each_index(space.local_shape(), [&](const std::vector<std::int64_t>& i) {
      const auto g = linear(op.interior_space().global_shape(), global_of(op, coords, i));
      v.push_back(in_interior(op.interior_box(), i) ? static_cast<double>(g + 1) : ghost);
    });
  }
  auto x = DistTensor<double>::uninitialized(space);
  x.local().copy_from(Tensor<double>::from_vector(space.local_shape(), v));
  return x;
}

template <class T>
void run_adjoint_matrix() {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto op = make_op<T>(c);
    auto r = distop::testing::adjoint_test(op);
    EXPECT_TRUE(r.passed) << c.name << ": " << r.str();
    ++ran;
  }
  EXPECT_GE(ran, 2);
}

}  // namespace

TEST(HaloExchangeAdjoint, MatrixDouble) { run_adjoint_matrix<double>(); }
TEST(HaloExchangeAdjoint, MatrixFloat) { run_adjoint_matrix<float>(); }

// Forward: the interior is unchanged, every ghost holds the global entry it mirrors, and ghosts
// beyond the domain boundary are zero; the input's ghosts are never read.
TEST(HaloExchange, EveryGhostHoldsTheEntryItMirrors) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto op = make_op<double>(c);
    auto y = op.apply(index_tensor(op, -7.0));
    if (!op.domain().partition().active()) {
      EXPECT_EQ(y.local_numel(), 0);
      continue;
    }
    const auto got = y.local().to_vector();
    const auto& coords = op.domain().partition().coords();
    std::size_t n = 0;
    for_each_index(op.domain().local_shape(), [&](const std::vector<std::int64_t>& i) {
      const auto g = linear(op.interior_space().global_shape(), global_of(op, coords, i));
      ASSERT_EQ(got[n], static_cast<double>(g + 1)) << "local entry " << n;  // 0 when outside
      ++n;
    });
  }
}

// A convolution with the windows' k, s, p, d (weights depending on the tap) computed by each rank
// from its padded block gives the sequential result on the rank's balanced share of the outputs.
TEST(HaloExchange, ConvolutionFromThePaddedBlocksIsTheSequentialOne) {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed || c.windows.empty()) continue;
    SCOPED_TRACE(c.name);
    auto op = make_op<double>(c);
    auto y = op.apply(index_tensor(op, -7.0));
    if (!op.domain().partition().active()) continue;
    ++ran;
    const auto& global = c.tensor;
    const int rank = global.rank();
    const auto& coords = op.domain().partition().coords();
    const auto& padded = op.domain().local_shape();
    const auto local = y.local().to_vector();
    std::vector<std::int64_t> out_begin, out_extent, taps;
    std::vector<std::int64_t> origin;  // global index of the padded block's first entry
    for (int a = 0; a < rank; ++a) {
      const auto h = halo_widths(global[a], c.grid[a], c.windows[a])[coords[a]];
      out_begin.push_back(h.out_begin);
      out_extent.push_back(h.out_end - h.out_begin);
      taps.push_back(c.windows[a].kernel);
      origin.push_back(h.own_begin - op.spec()[a][coords[a]].left);
    }
    for_each_index(Shape(out_extent), [&](const std::vector<std::int64_t>& o) {
      double distributed = 0, sequential = 0;
      for_each_index(Shape(taps), [&](const std::vector<std::int64_t>& j) {
        const double weight = static_cast<double>(linear(Shape(taps), j) + 1);
        std::vector<std::int64_t> g(static_cast<std::size_t>(rank)), l(g.size());
        for (int a = 0; a < rank; ++a) {
          const auto& w = c.windows[a];
          g[a] = (out_begin[a] + o[a]) * w.stride - w.padding + j[a] * w.dilation;
          l[a] = g[a] - origin[a];
        }
        const auto gi = linear(global, g);
        if (gi < 0) return;  // the layer's zero padding
        sequential += weight * static_cast<double>(gi + 1);
        const auto li = linear(padded, l);
        ASSERT_GE(li, 0) << "a tap outside the padded block";
        distributed += weight * local[static_cast<std::size_t>(li)];
      });
      ASSERT_EQ(distributed, sequential);
    });
  }
  if (world_size() >= 2) {
    EXPECT_GE(ran, 1);
  }
}

// Adjoint: with ones in every ghost and zeros in the interiors, each interior entry receives the
// number of ghost entries (on all ranks) that mirror it, and every ghost is zeroed.
TEST(HaloExchange, AdjointAddsEveryGhostIntoItsOwner) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto op = make_op<double>(c);
    const auto& p = op.domain().partition();
    // How often each global entry is mirrored, from the metadata of every grid cell.
    const auto& global = c.tensor;
    std::vector<double> copies(static_cast<std::size_t>(global.numel()), 0.0);
    for (int cell = 0; cell < p.size(); ++cell) {
      const auto cc = p.coords_of(cell);
      std::vector<std::int64_t> ext;
      for (int a = 0; a < global.rank(); ++a) {
        const auto& w = op.spec()[a][cc[a]];
        ext.push_back(w.left + op.interior_space().local_shape_at(cc)[a] + w.right);
      }
      Box inner{{}, {}};
      for (int a = 0; a < global.rank(); ++a) {
        inner.offset.push_back(op.spec()[a][cc[a]].left);
        inner.extent.push_back(op.interior_space().local_shape_at(cc)[a]);
      }
      for_each_index(Shape(ext), [&](const std::vector<std::int64_t>& i) {
        const auto g = linear(global, global_of(op, cc, i));
        if (g >= 0 && !in_interior(inner, i)) copies[static_cast<std::size_t>(g)] += 1;
      });
    }
    // Interior zero, ghosts one.
    std::vector<double> v;
    if (p.active()) {
      for_each_index(op.domain().local_shape(), [&](const std::vector<std::int64_t>& i) {
        v.push_back(in_interior(op.interior_box(), i) ? 0.0 : 1.0);
      });
    }
    auto ones = DistTensor<double>::uninitialized(op.domain());
    ones.local().copy_from(Tensor<double>::from_vector(op.domain().local_shape(), v));
    auto x = op.apply_adjoint(ones);
    if (!p.active()) continue;
    const auto got = x.local().to_vector();
    std::size_t n = 0;
    for_each_index(op.domain().local_shape(), [&](const std::vector<std::int64_t>& i) {
      if (in_interior(op.interior_box(), i)) {
        const auto g = linear(global, global_of(op, p.coords(), i));
        ASSERT_EQ(got[n], copies[static_cast<std::size_t>(g)]) << "interior entry " << n;
      } else {
        ASSERT_EQ(got[n], 0.0) << "ghost entry " << n;
      }
      ++n;
    });
  }
}

// Forward receives exactly the ghost volume (here no ghost lies on the domain boundary) and sends
// what the neighbours receive; the adjoint is the reverse.
TEST(HaloExchange, CommunicationAccountingMatchesTheClosedForm) {
  DISTOP_REQUIRE_RANKS(4);
  // [8, 6] on a 2 x 2 grid, interiors 4 x 3. Axis 0 widths {0, 1} {2, 0}, axis 1 {0, 1} {1, 0}.
  // Padded blocks: row 0 is 5 x 4, row 1 is 6 x 4. Cell (0, 0): sweep 0 receives 1 x 3 from
  // (1, 0) and sends it 2 x 3; sweep 1 (whole padded axis 0) receives 5 x 1 from (0, 1) and sends
  // it 5 x 1. Cell (1, 0): sweep 0 receives 2 x 3 and sends 1 x 3; sweep 1 receives 6 x 1 and
  // sends 6 x 1. Columns are alike. Received = padded - interior = 8 and 12 entries.
  TensorSpace interior(Shape{8, 6}, Partition::world(Shape{2, 2}));
  HaloExchange<double> op(interior, HaloSpec{{{0, 1}, {2, 0}}, {{0, 1}, {1, 0}}});
  const int r = world_rank();
  const auto f = op.forward_stats();
  const auto a = op.adjoint_stats();
  if (r < 2) {
    EXPECT_EQ(f, (CommStats{2, 8 * 11, 2, 8 * 8}));
    EXPECT_EQ(a, (CommStats{2, 8 * 8, 2, 8 * 11}));
  } else if (r < 4) {
    EXPECT_EQ(f, (CommStats{2, 8 * 9, 2, 8 * 12}));
    EXPECT_EQ(a, (CommStats{2, 8 * 12, 2, 8 * 9}));
  } else {
    EXPECT_EQ(f, CommStats{});
    EXPECT_EQ(a, CommStats{});
  }
  if (r < 4) {
    EXPECT_EQ(f.bytes_received,
              8 * (op.domain().local_shape().numel() - interior.local_shape().numel()));
  }
  HaloExchange<float> single(interior, op.spec());
  if (r == 0) {
    EXPECT_EQ(single.forward_stats(), (CommStats{2, 4 * 11, 2, 4 * 8}));
  }
}

// For every case built from windows (so no ghost lies beyond the domain boundary) a rank receives
// its whole ghost volume; over all ranks, what is sent is what is received.
TEST(HaloExchange, ForwardReceivesTheGhostVolume) {
  std::vector<std::int64_t> totals;  // per case: sent minus received bytes, summed over ranks
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    auto op = make_op<float>(c);
    const auto f = op.forward_stats();
    const auto ghosts =
        op.domain().local_shape().numel() - op.interior_space().local_shape().numel();
    if (!c.windows.empty()) {
      EXPECT_EQ(f.bytes_received, 4 * ghosts);
    }
    EXPECT_LE(f.bytes_received, 4 * ghosts);
    EXPECT_EQ(op.adjoint_stats(),
              (CommStats{f.messages_received, f.bytes_received, f.messages_sent, f.bytes_sent}));
    totals.push_back(f.bytes_sent - f.bytes_received);
    totals.push_back(f.messages_sent - f.messages_received);
  }
  MPI_Allreduce(MPI_IN_PLACE, totals.data(), static_cast<int>(totals.size()), MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  for (auto t : totals) EXPECT_EQ(t, 0);
}

namespace {

using distop::test::error_of;

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(HaloExchangeErrors, HaloWiderThanTheNeighboursBlock) {
  DISTOP_REQUIRE_RANKS(2);
  // Two blocks of 3: part 0 asks for 4 entries of part 1.
  TensorSpace interior(Shape{6}, Partition::world(Shape{2}));
  auto msg = error_of([&] { HaloExchange<double>(interior, HaloSpec{{{0, 4}, {0, 0}}}); });
  EXPECT_TRUE(contains(msg, "more than its right neighbour's block of 3")) << msg;
  // From a window (two parts never fail: the need is clipped to the domain): k = 7, p = 3 over
  // three blocks of 2, where part 0's outputs 0, 1 read inputs up to 4.
  if (world_size() >= 3) {
    TensorSpace three(Shape{6}, Partition::world(Shape{3}));
    msg = error_of([&] { HaloExchange<double>(three, std::vector<ConvWindow>{{7, 1, 3, 1}}); });
    EXPECT_TRUE(contains(msg, "a right halo of 3 wider than its right neighbour's block")) << msg;
  }
}

TEST(HaloExchangeErrors, PartitionRankMustMatchTheTensorRank) {
  // A 2-D tensor split along axis 0 only, on a 1-D grid.
  const int n = world_size();
  Partition p = Partition::world(Shape{n});
  TensorSpace interior(p, Decomposition::balanced(Shape{2 * n, 4}, Shape{n}, {0, -1}));
  auto msg = error_of([&] { HaloExchange<float>(interior, HaloSpec{{{0, 0}}, {{0, 0}}}); });
  EXPECT_TRUE(contains(msg, "one grid axis per tensor axis")) << msg;
}

TEST(HaloExchangeErrors, MorePartsThanElements) {
  const int n = world_size();
  Partition p = Partition::world(Shape{n});
  // More parts than inputs: the space itself cannot be built.
  if (n > 1) {
    EXPECT_THROW(TensorSpace(Shape{n - 1}, p), Error);
  }
  // More parts than outputs: n + 1 inputs, k = 3 unpadded give n - 1 outputs.
  TensorSpace interior(Shape{n + 1}, p);
  auto msg = error_of([&] {
    HaloExchange<double>(interior, std::vector<ConvWindow>{{3, 1, 0, 1}});
  });
  EXPECT_TRUE(contains(msg, "HaloExchange")) << msg;
}

TEST(HaloExchangeErrors, MalformedSpecs) {
  const int n = world_size();
  TensorSpace interior(Shape{4 * n, 3}, Partition::world(Shape{n, 1}));
  HaloSpec ok(2);
  ok[0].assign(static_cast<std::size_t>(n), GhostWidths{1, 1});
  ok[1] = {{0, 0}};
  EXPECT_NO_THROW(HaloExchange<double>(interior, ok));
  auto wrong_axes = ok;
  wrong_axes.pop_back();
  EXPECT_TRUE(contains(error_of([&] { HaloExchange<double>(interior, wrong_axes); }),
                       "ghost widths for 1 axes"));
  auto wrong_parts = ok;
  wrong_parts[1].push_back({0, 0});
  EXPECT_TRUE(contains(error_of([&] { HaloExchange<double>(interior, wrong_parts); }),
                       "split in 1 parts but 2 ghost widths"));
  auto negative = ok;
  negative[0][0].right = -1;
  EXPECT_TRUE(
      contains(error_of([&] { HaloExchange<double>(interior, negative); }), "non-negative"));
}

TEST(HaloExchangeErrors, WindowsNeedABalancedSplit) {
  DISTOP_REQUIRE_RANKS(2);
  TensorSpace unbalanced(Partition::world(Shape{2}, {0, 1}),
                         Decomposition::blocks(Shape{8}, Shape{2}, {{2, 6}}));
  auto msg = error_of([&] {
    HaloExchange<double>(unbalanced, std::vector<ConvWindow>{{3, 1, 1, 1}});
  });
  EXPECT_TRUE(contains(msg, "is not balanced")) << msg;
}

TEST(HaloExchangeErrors, RanksPassingDifferentArgumentsAllFail) {
  DISTOP_REQUIRE_RANKS(2);
  TensorSpace interior(Shape{8}, Partition::world(Shape{2}, {0, 1}));
  const std::int64_t w = world_rank() == 1 ? 2 : 1;
  auto msg = error_of([&] { HaloExchange<double>(interior, HaloSpec{{{0, w}, {1, 0}}}); });
  EXPECT_TRUE(contains(msg, "different arguments")) << msg;
}

TEST(HaloExchangeErrors, TensorOfAnotherSpace) {
  TensorSpace interior(Shape{5}, Partition::world(Shape{1}, {0}));
  HaloExchange<double> op(interior, HaloSpec{{{1, 1}}});
  DistTensor<double> wrong(interior);
  DistTensor<double> y(op.range());
  auto msg = error_of([&] { op.forward(wrong, y); });
  EXPECT_TRUE(contains(msg, "HaloExchange.forward")) << msg;
  EXPECT_THROW(op.adjoint(wrong, y), Error);
}
