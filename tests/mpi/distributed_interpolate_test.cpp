// DistributedInterpolate (DistDL's DistributedUpsample) at 1-4 ranks: 1-D to 3-D, every mode,
// align_corners both ways, integer and fractional scale factors and sizes, over balanced, uneven,
// two-axis, batch-and-spatial and idle-rank partitions, equal to the one-rank layer (outputs bit
// for bit, input gradients to rounding); a Repartition only where the input's own blocks cannot
// serve; the dot-product adjoint test of its linearisation (double and float); gradients against
// finite differences; and bad input an Error on every rank.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "box_util.hpp"
#include "distop/core/timers.hpp"
#include "distop/nn/interpolate.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/linearisation.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;
using M = nn::InterpolateMode;

namespace {

std::vector<std::int64_t> balanced(std::int64_t n, std::int64_t parts) {
  const auto b = balanced_bounds(n, parts);
  std::vector<std::int64_t> e;
  for (std::size_t i = 0; i + 1 < b.size(); ++i) e.push_back(b[i + 1] - b[i]);
  return e;
}

// Blocks of 1 but one of the rest, first or last.
std::vector<std::int64_t> uneven(std::int64_t n, std::int64_t parts, bool large_first) {
  std::vector<std::int64_t> e(static_cast<std::size_t>(parts), 1);
  (large_first ? e.front() : e.back()) = n - (parts - 1);
  return e;
}

// Partitions made once per (grid, ranks) and shared by the tests (each is a collective
// communicator construction; every rank asks for them in the same order).
const Partition& partition(const Shape& grid, const std::vector<int>& ranks = {}) {
  static std::map<std::pair<std::vector<std::int64_t>, std::vector<int>>, Partition> made;
  const auto key = std::make_pair(grid.extents(), ranks);
  auto it = made.find(key);
  if (it == made.end()) it = made.emplace(key, Partition::world(grid, ranks)).first;
  return it->second;
}

// How a case's input is split: `splits` gives (tensor axis, block extents) pairs, each tensor axis
// split by the grid axis of the same index; `ranks` as Partition::world's.
struct Layout {
  std::string name;
  std::vector<std::pair<int, std::vector<std::int64_t>>> splits;
  std::vector<int> ranks;
};

TensorSpace space_of(const Shape& shape, const Layout& l) {
  std::vector<std::int64_t> grid(static_cast<std::size_t>(shape.rank()), 1);
  std::vector<std::vector<std::int64_t>> extents;
  for (int a = 0; a < shape.rank(); ++a) extents.push_back({shape[a]});
  for (const auto& [axis, e] : l.splits) {
    grid[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(e.size());
    extents[static_cast<std::size_t>(axis)] = e;
  }
  const Partition& p = partition(Shape(grid), l.ranks);
  return TensorSpace(p, Decomposition::blocks(shape, p.shape(), extents));
}

struct Case {
  std::string name;
  Shape shape;  // [N, C, s..]
  nn::InterpolateOptions options;
  std::vector<Layout> layouts;
};

// The cases at this world size: each with the layouts that fit it (every block and every part's
// outputs non-empty).
std::vector<Case> cases() {
  const std::int64_t n = world_size();
  auto line = [&](int axis, std::int64_t extent) {
    return Layout{"balanced on axis " + std::to_string(axis), {{axis, balanced(extent, n)}}, {}};
  };
  auto lopsided = [&](int axis, std::int64_t extent, bool first) {
    return Layout{std::string(first ? "large first" : "large last") + " block on axis " +
                      std::to_string(axis),
                  {{axis, uneven(extent, n, first)}},
                  {}};
  };
  std::vector<Case> c{
      {"1-D linear x1.5", Shape{2, 2, 11}, {.scale_factor = 1.5, .mode = M::linear}, {}},
      {"1-D nearest x0.5", Shape{1, 2, 13}, {.scale_factor = 0.5}, {}},
      {"1-D nearest-exact size 17", Shape{1, 1, 9}, {.size = 17, .mode = M::nearest_exact}, {}},
      {"1-D linear x2.5 aligned",
       Shape{1, 1, 7},
       {.scale_factor = 2.5, .mode = M::linear, .align_corners = true},
       {}},
      {"2-D bilinear size (9, 7)", Shape{1, 2, 6, 5}, {.size = {9, 7}, .mode = M::bilinear}, {}},
      {"2-D bilinear x(0.5, 1.5) aligned",
       Shape{2, 1, 8, 5},
       {.scale_factor = {0.5, 1.5}, .mode = M::bilinear, .align_corners = true},
       {}},
      {"3-D trilinear x(1.5, 2, 0.5)",
       Shape{1, 1, 4, 3, 8},
       {.scale_factor = {1.5, 2, 0.5}, .mode = M::trilinear},
       {}},
      {"3-D nearest size (5, 4, 4)", Shape{1, 1, 3, 4, 6}, {.size = {5, 4, 4}}, {}},
  };
  c[0].layouts = {line(2, 11), lopsided(2, 11, true)};
  c[1].layouts = {line(2, 13)};
  if (n >= 3) c[1].layouts.push_back({"idle ranks", {{2, {2, 11}}}, {static_cast<int>(n) - 1, 0}});
  c[2].layouts = {lopsided(2, 9, false)};
  c[3].layouts = {line(2, 7)};
  c[4].layouts = {line(2, 6)};
  if (n == 4) c[4].layouts.push_back({"2 x 2, uneven", {{2, {1, 5}}, {3, {3, 2}}}, {}});
  c[5].layouts = {lopsided(3, 5, true)};
  if (n == 4) c[5].layouts.push_back({"batch and spatial", {{0, {1, 1}}, {3, {4, 1}}}, {}});
  c[6].layouts = {lopsided(2, 4, false)};
  if (n == 4) c[6].layouts.push_back({"2 x 2 over axes 2 and 4", {{2, {2, 2}}, {4, {5, 3}}}, {}});
  c[7].layouts = {line(4, 6)};
  return c;
}

struct Outcome {
  Var<double> x, y;
};

// y = layer(x) and backward from dL/dy, with x and dL/dy drawn by global index (so every
// partitioning holds the same global values).
template <class Layer>
Outcome forward_backward(Layer& layer, const TensorSpace& xs) {
  Outcome r{Var<double>(test::random_tensor<double>(xs, 1), true), {}};
  Tape tape;
  r.y = layer.forward(tape, r.x);
  r.y.grad().local().copy_from(test::random_tensor<double>(r.y.space(), 2).local());
  tape.backward();
  return r;
}

// The number of times the operators Repartition and HaloExchange ran in f (forward and backward).
std::pair<long long, long long> calls_in(const std::function<void()>& f) {
  timers::reset();
  timers::enable(true);
  f();
  timers::enable(false);
  std::pair<long long, long long> calls{0, 0};
  for (const auto& [key, e] : timers::snapshot()) {
    if (key == "Repartition") calls.first += e.calls;
    if (key == "HaloExchange") calls.second += e.calls;
  }
  timers::reset();
  return calls;
}

}  // namespace

TEST(DistributedInterpolate, EqualsTheOneRankLayer) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    nn::Interpolate<double> one(c.options);
    const Outcome r1 = forward_backward(one, test::local_space(c.shape));
    const auto want_y = r1.y.value().local().to_vector();
    const auto want_dx = r1.x.grad().local().to_vector();
    for (const Layout& l : c.layouts) {
      SCOPED_TRACE(l.name);
      const TensorSpace xs = space_of(c.shape, l);
      nn::DistributedInterpolate<double> layer(c.options);
      const Outcome r = forward_backward(layer, xs);
      ASSERT_TRUE(r.y.space() == layer.output_space(xs));
      EXPECT_TRUE(r.y.space().partition().same_as(xs.partition()));
      test::expect_box_near(r.y.value(), want_y, 0.0, "output");
      test::expect_box_near(r.x.grad(), want_dx, 1e-13, "input gradient");
    }
  }
}

// x's own blocks serve where every part's reads stay within its neighbours (no Repartition);
// where they do not, x is first balanced (a Repartition runs); a split that no part reads across
// needs no halo exchange.
TEST(DistributedInterpolate, RepartitionsOnlyWhereTheInputsBlocksCannotServe) {
  const std::int64_t n = world_size();
  const Shape shape{1, 1, 16};
  const nn::InterpolateOptions up{.scale_factor = 1.5, .mode = M::linear};
  auto run = [&](const std::vector<std::int64_t>& blocks, const nn::InterpolateOptions& o) {
    nn::DistributedInterpolate<double> layer(o);
    const TensorSpace xs = space_of(shape, {"", {{2, blocks}}, {}});
    return calls_in([&] { forward_backward(layer, xs); });
  };
  const auto bal = run(balanced(16, n), up);
  EXPECT_EQ(bal.first, 0);
  EXPECT_EQ(bal.second > 0, n > 1);
  // Blocks 1, 15 at 2 ranks: part 0's outputs [0, 12) read inputs up to 8, inside part 1's block;
  // 1, 1, 14 at 3 (1, 1, 1, 13 at 4): part 0's outputs [0, 8) read inputs up to 5 (up to 4 for
  // [0, 6)), beyond part 1's block of one.
  const auto lop = run(uneven(16, n, false), up);
  EXPECT_EQ(lop.first > 0, n > 2);
  // Nearest, x2 over even blocks: every part reads its own block only.
  const auto even = run(balanced(16, n), {.scale_factor = n == 3 ? 1.0 : 2.0});
  EXPECT_EQ(even.first + even.second, 0);
}

TEST(DistributedInterpolateAdjoint, DotProductTest) {
  const std::int64_t n = world_size();
  auto check = [&](auto zero, const Shape& shape, const Layout& l,
                   const nn::InterpolateOptions& o) {
    using T = decltype(zero);
    nn::DistributedInterpolate<T> layer(o);
    const TensorSpace xs = space_of(shape, l);
    Var<T> x(DistTensor<T>(xs), true);
    distop::testing::TapeLinearisation<T> op(x, layer.output_space(xs),
                                             [&](Tape& t) { return layer.forward(t, x); });
    const auto r = distop::testing::adjoint_test(op);
    EXPECT_TRUE(r.passed) << r.str();
  };
  // Repartition (at 3-4 ranks), halo exchange and the kernel's scatter-add.
  const Layout lop{"", {{2, uneven(16, n, false)}}, {}};
  check(0.0, Shape{1, 2, 16}, lop, {.scale_factor = 1.5, .mode = M::linear});
  check(0.0f, Shape{1, 2, 16}, lop,
        {.scale_factor = 0.75, .mode = M::linear, .align_corners = true});
  const Layout two{"", {{3, balanced(7, n)}}, {}};
  check(0.0, Shape{2, 1, 3, 7}, two, {.size = {4, 12}, .mode = M::bilinear});
  check(0.0f, Shape{2, 1, 3, 7}, two, {.scale_factor = 1.5, .mode = M::nearest_exact});
}

TEST(DistributedInterpolate, GradientMatchesFiniteDifferences) {
  const std::int64_t n = world_size();
  nn::DistributedInterpolate<double> layer({.size = {5, 9}, .mode = M::bilinear});
  const TensorSpace xs = space_of(Shape{1, 1, 4, 6}, {"", {{3, uneven(6, n, true)}}, {}});
  Var<double> x(test::random_tensor<double>(xs, 1), true);
  const auto r = test::random_tensor<double>(layer.output_space(xs), 5);
  const auto report = distop::testing::gradcheck(
      [&](Tape& tape) { return test::weighted_sum(tape, layer.forward(tape, x), r); }, {x},
      {.tolerance = 1e-7, .max_entries = 2});
  EXPECT_TRUE(report.passed) << report.str();
}

TEST(DistributedInterpolate, BadInputIsAnErrorOnEveryRank) {
  const std::int64_t n = world_size();
  Tape tape;
  // The options alone.
  EXPECT_THROW(nn::DistributedInterpolate<float>({.scale_factor = 2, .align_corners = true}),
               Error);
  EXPECT_THROW(nn::DistributedInterpolate<float>({.size = 2, .scale_factor = 2}), Error);
  // A linear mode of another dimension.
  nn::DistributedInterpolate<float> bilinear({.scale_factor = 2, .mode = M::bilinear});
  Var<float> line(
      DistTensor<float>(space_of(Shape{1, 1, 4 * n}, {"", {{2, balanced(4 * n, n)}}, {}})));
  EXPECT_THROW(bilinear.forward(tape, line), Error);
  // A partition that does not give each tensor axis its own grid axis.
  nn::DistributedInterpolate<float> up({.scale_factor = 2});
  Var<float> mapped(DistTensor<float>(TensorSpace(
      partition(Shape{n}), Decomposition::balanced(Shape{1, 1, 4 * n}, Shape{n}, {-1, -1, 0}))));
  EXPECT_THROW(up.forward(tape, mapped), Error);
  if (n >= 2) {
    // Fewer outputs than parts.
    nn::DistributedInterpolate<float> down({.size = n - 1});
    Var<float> x(
        DistTensor<float>(space_of(Shape{1, 1, 2 * n}, {"", {{2, balanced(2 * n, n)}}, {}})));
    const std::string e = test::error_of([&] { down.forward(tape, x); });
    EXPECT_NE(e.find("a part would compute nothing"), std::string::npos) << e;
  }
  if (n == 4) {
    // 6 inputs scaled by 0.8 over 4 parts (blocks 2, 2, 1, 1): the last part's one output reads
    // input floor(3 / 0.8) = 3, two blocks to its left.
    nn::DistributedInterpolate<float> down({.scale_factor = 0.8});
    Var<float> x(DistTensor<float>(space_of(Shape{1, 1, 6}, {"", {{2, balanced(6, 4)}}, {}})));
    const std::string e = test::error_of([&] { down.forward(tape, x); });
    EXPECT_NE(e.find("beyond its adjacent parts' blocks"), std::string::npos) << e;
  }
}
