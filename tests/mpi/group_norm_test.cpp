// GroupNorm and InstanceNorm (torch.nn.GroupNorm, torch.nn.InstanceNorm1d/2d/3d) on [N, C, s...]
// with 1-3 spatial axes: the one-rank layer against torch's definition written out in plain loops;
// the layer over batch, balanced and uneven spatial, mixed and idle-rank partitions against the
// one-rank layer (outputs and input gradients to rounding, parameter gradients summed over the
// ranks' copies); gradients against finite differences; float against double; InstanceNorm as
// GroupNorm with G = C; torch's state_dict names; and bad input an Error on every rank.
#include "distop/nn/group_norm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::world_size;

namespace {

constexpr double kEps = 1e-5;

struct Case {
  std::string name;
  Shape shape;  // [N, C, s...]
  std::int64_t groups;
};

// N at least 4, so that the batch splits over up to 4 ranks; every spatial axis too.
std::vector<Case> cases() {
  return {
      {"1-D", Shape{5, 6, 7}, 3}, {"2-D", Shape{4, 4, 5, 6}, 2}, {"3-D", Shape{4, 6, 4, 5, 4}, 3}};
}

struct Layout {
  std::string name;
  Partition partition;
  std::vector<std::vector<std::int64_t>> extents;  // per tensor axis
  std::vector<int> axis_map;
};

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

// The partitions the layouts use, made once per test (each is a collective communicator
// construction, and the layer's sharing communicators are cached on them).
struct Grids {
  Partition line = Partition::world(Shape{world_size()});
  Partition pair = world_size() >= 3 ? Partition::world(Shape{2}) : line;  // ranks 2.. idle
  Partition square = world_size() == 4 ? Partition::world(Shape{2, 2}) : line;
};

std::vector<Layout> layouts(const Shape& shape, const Grids& grids) {
  const auto n = static_cast<std::int64_t>(world_size());
  const int rank = shape.rank(), last = rank - 1;
  std::vector<std::vector<std::int64_t>> whole;
  for (int a = 0; a < rank; ++a) whole.push_back({shape[a]});
  const std::vector<int> none(static_cast<std::size_t>(rank), -1);
  const Partition& line = grids.line;
  std::vector<Layout> out;
  auto add = [&](std::string name, const Partition& p,
                 std::vector<std::pair<int, std::vector<std::int64_t>>> splits,
                 std::vector<int> grid_axes) {
    auto e = whole;
    auto m = none;
    for (std::size_t k = 0; k < splits.size(); ++k) {
      e[static_cast<std::size_t>(splits[k].first)] = splits[k].second;
      m[static_cast<std::size_t>(splits[k].first)] = grid_axes[k];
    }
    out.push_back({std::move(name), p, e, m});
  };
  add("batch split", line, {{0, balanced(shape[0], n)}}, {0});
  add("spatial split, balanced", line, {{last, balanced(shape[last], n)}}, {0});
  if (n >= 2) {
    add("spatial split, uneven", line, {{last, uneven(shape[last], n, false)}}, {0});
    add("first spatial axis, large first block", line, {{2, uneven(shape[2], n, true)}}, {0});
  }
  if (n >= 3)  // ranks 2.. idle
    add("idle ranks", grids.pair, {{last, {2, shape[last] - 2}}}, {0});
  if (n == 4) {
    const Partition& square = grids.square;
    add("batch and spatial", square, {{0, {1, shape[0] - 1}}, {last, {3, shape[last] - 3}}},
        {0, 1});
    if (rank >= 4)
      add("two spatial axes", square, {{2, balanced(shape[2], 2)}, {3, uneven(shape[3], 2, false)}},
          {0, 1});
  }
  return out;
}

TensorSpace space_of(const Shape& shape, const Layout& l) {
  return TensorSpace(l.partition,
                     Decomposition::blocks(shape, l.partition.shape(), l.extents, l.axis_map));
}

// torch's nn.GroupNorm: per sample and group, the mean and biased variance over the group's
// channels and all of space; then the per-channel affine map. x is the whole tensor, row-major.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape, std::int64_t groups,
                              const std::vector<double>& w, const std::vector<double>& b) {
  const std::int64_t n = shape[0], c = shape[1], s = shape.numel() / (n * c), per = c / groups;
  std::vector<double> y(x.size());
  auto at = [&](std::int64_t i, std::int64_t ch, std::int64_t k) {
    return static_cast<std::size_t>((i * c + ch) * s + k);
  };
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t g = 0; g < groups; ++g) {
      double sum = 0;
      for (std::int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (std::int64_t k = 0; k < s; ++k) sum += x[at(i, ch, k)];
      const double mean = sum / static_cast<double>(per * s);
      double sq = 0;
      for (std::int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (std::int64_t k = 0; k < s; ++k)
          sq += (x[at(i, ch, k)] - mean) * (x[at(i, ch, k)] - mean);
      const double var = sq / static_cast<double>(per * s);
      for (std::int64_t ch = g * per; ch < (g + 1) * per; ++ch)
        for (std::int64_t k = 0; k < s; ++k)
          y[at(i, ch, k)] =
              (x[at(i, ch, k)] - mean) / std::sqrt(var + kEps) * w[static_cast<std::size_t>(ch)] +
              b[static_cast<std::size_t>(ch)];
    }
  return y;
}

// Weight in [0.5, 1.5) and bias in [-1, 1) by channel: the same on every rank and copy.
template <class T>
void set_affine(nn::GroupNorm<T>& norm) {
  if (norm.weight().value().local_numel() == 0) return;  // outside the partition
  norm.weight().value().local().copy_from(
      random_tensor<T>(norm.weight().space(), 2, 0.5, 1.5).local());
  norm.bias().value().local().copy_from(random_tensor<T>(norm.bias().space(), 3).local());
}

// x with a mean well away from 0 against its spread (the statistics must not cancel).
Var<double> input(const TensorSpace& xs) {
  return Var<double>(random_tensor<double>(xs, 1, 2, 5), true);
}

struct Outcome {
  Var<double> x, y;
};

Outcome run_layer(nn::GroupNorm<double>& norm, const TensorSpace& xs) {
  Outcome r{input(xs), {}};
  Tape tape;
  r.y = norm.forward(tape, r.x);
  Var<double> loss = test::weighted_sum(tape, r.y, random_tensor<double>(xs, 4));
  backward(tape, loss);
  return r;
}

}  // namespace

TEST(GroupNorm, MatchesTorchsDefinitionAndTheOneRankLayer) {
  const Grids grids;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::int64_t channels = c.shape[1];
    // The one-rank layer on the whole tensor, on every rank, against the plain loops.
    const TensorSpace whole = local_space(c.shape);
    nn::GroupNorm<double> one(c.groups, channels);
    set_affine(one);
    const Outcome r1 = run_layer(one, whole);
    const auto want =
        reference(r1.x.value().local().to_vector(), c.shape, c.groups,
                  one.weight().value().local().to_vector(), one.bias().value().local().to_vector());
    test::expect_box_near(r1.y.value(), want, 1e-12, "one-rank output against the loops");
    const auto dx1 = r1.x.grad().local().to_vector();
    const auto dw1 = one.weight().grad().local().to_vector();
    const auto db1 = one.bias().grad().local().to_vector();

    for (const Layout& l : layouts(c.shape, grids)) {
      SCOPED_TRACE(l.name);
      const TensorSpace xs = space_of(c.shape, l);
      nn::GroupNorm<double> norm(c.groups, channels, l.partition);
      set_affine(norm);
      const Outcome r = run_layer(norm, xs);
      ASSERT_TRUE(r.y.space() == xs);
      test::expect_box_near(r.y.value(), want, 1e-12, "output");
      test::expect_box_near(r.x.grad(), dx1, 1e-12, "input gradient");
      // Each copy holds its own box's part; together they are the one-rank gradient.
      const auto n = static_cast<std::size_t>(channels);
      const auto dw = test::sum_over_ranks(norm.weight().grad(), n);
      const auto db = test::sum_over_ranks(norm.bias().grad(), n);
      for (std::size_t k = 0; k < n; ++k) {
        EXPECT_NEAR(dw[k], dw1[k], 1e-11) << "weight gradient " << k;
        EXPECT_NEAR(db[k], db1[k], 1e-11) << "bias gradient " << k;
      }
    }
  }
}

TEST(GroupNorm, GradientsMatchFiniteDifferences) {
  const Grids grids;
  // Every entry at one rank on a small tensor, a seeded subset of each rank's entries on the
  // partitions of the 2-D case (every checked entry costs two collective forward passes).
  const Shape small{2, 4, 3};
  nn::GroupNorm<double> one(2, 4);
  set_affine(one);
  Var<double> x1 = input(local_space(small));
  const auto report = distop::testing::gradcheck([&](Tape& t) { return one.forward(t, x1); },
                                                 {x1, one.weight(), one.bias()});
  EXPECT_TRUE(report.passed) << report.str();

  const Case c = cases()[1];
  for (const Layout& l : layouts(c.shape, grids)) {
    SCOPED_TRACE(l.name);
    nn::GroupNorm<double> norm(c.groups, c.shape[1], l.partition);
    set_affine(norm);
    Var<double> x = input(space_of(c.shape, l));
    const auto check =
        distop::testing::gradcheck([&](Tape& t) { return norm.forward(t, x); },
                                   {x, norm.weight(), norm.bias()}, {.max_entries = 2});
    EXPECT_TRUE(check.passed) << check.str();
  }
}

TEST(GroupNorm, FloatMatchesDouble) {
  const Grids grids;
  const Case c = cases()[2];
  for (const Layout& l : layouts(c.shape, grids)) {
    SCOPED_TRACE(l.name);
    nn::GroupNorm<float> nf(c.groups, c.shape[1], l.partition);
    nn::GroupNorm<double> nd(c.groups, c.shape[1], l.partition);
    set_affine(nf);
    set_affine(nd);
    test::expect_float_matches_double(
        space_of(c.shape, l), [&](Tape& t, const Var<double>& x) { return nd.forward(t, x); },
        [&](Tape& t, const Var<float>& x) { return nf.forward(t, x); }, 1e-5, 5, 2.0, 5.0);
  }
}

TEST(InstanceNorm, IsGroupNormWithOneChannelPerGroup) {
  const Grids grids;
  for (const Case& c : {cases()[0]}) {  // InstanceNorm1d; the kernels are GroupNorm's at every d
    SCOPED_TRACE(c.name);
    const std::int64_t channels = c.shape[1];
    for (const Layout& l : layouts(c.shape, grids)) {
      SCOPED_TRACE(l.name);
      const TensorSpace xs = space_of(c.shape, l);
      // torch's defaults: no affine map, no parameters.
      nn::InstanceNorm<double> plain(channels, l.partition);
      EXPECT_TRUE(plain.named_parameters().empty());
      EXPECT_THROW(plain.weight(), Error);
      nn::GroupNorm<double> plain_group(channels, channels, l.partition, {.affine = false});
      Tape tape;
      const Var<double> x = input(xs);
      EXPECT_EQ(plain.forward(tape, x).value().local().to_vector(),
                plain_group.forward(tape, x).value().local().to_vector());
      // Affine: the same outputs and gradients, bit for bit.
      nn::InstanceNorm<double> inst(channels, l.partition, {.affine = true});
      nn::GroupNorm<double> group(channels, channels, l.partition);
      set_affine(inst);
      set_affine(group);
      const Outcome ri = run_layer(inst, xs);
      const Outcome rg = run_layer(group, xs);
      EXPECT_EQ(ri.y.value().local().to_vector(), rg.y.value().local().to_vector());
      EXPECT_EQ(ri.x.grad().local().to_vector(), rg.x.grad().local().to_vector());
      EXPECT_EQ(inst.weight().grad().local().to_vector(),
                group.weight().grad().local().to_vector());
      EXPECT_EQ(inst.bias().grad().local().to_vector(), group.bias().grad().local().to_vector());
    }
  }
}

TEST(GroupNorm, StateDictHasTorchsNames) {
  nn::GroupNorm<double> norm(2, 4);
  const auto params = norm.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "weight");
  EXPECT_EQ(params[1].name, "bias");
  const auto state = norm.state_dict();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.at("weight").shape, Shape{4});
  EXPECT_EQ(state.at("bias").shape, Shape{4});
  EXPECT_EQ(std::get<std::vector<double>>(state.at("weight").values), std::vector<double>(4, 1.0));
  EXPECT_EQ(std::get<std::vector<double>>(state.at("bias").values), std::vector<double>(4, 0.0));
  EXPECT_TRUE(nn::InstanceNorm<double>(4).state_dict().empty());
  const auto affine = nn::InstanceNorm<double>(4, {.affine = true}).state_dict();
  EXPECT_EQ(affine.size(), 2u);
  EXPECT_EQ(affine.count("weight") + affine.count("bias"), 2u);
}

TEST(GroupNorm, BadInputIsAnErrorOnEveryRank) {
  const auto n = static_cast<std::int64_t>(world_size());
  EXPECT_NE(test::error_of([] { nn::GroupNorm<double>(3, 4); }).find("divisible"),
            std::string::npos);
  const Partition line = Partition::world(Shape{n});
  nn::GroupNorm<double> norm(2, 4, line);
  Tape tape;
  auto forward_on = [&](const Shape& shape, std::vector<int> map) {
    std::vector<std::vector<std::int64_t>> e;
    for (int a = 0; a < shape.rank(); ++a)
      e.push_back(map[static_cast<std::size_t>(a)] == 0 ? balanced(shape[a], n)
                                                        : std::vector<std::int64_t>{shape[a]});
    const TensorSpace xs(line, Decomposition::blocks(shape, line.shape(), e, map));
    return test::error_of([&] { norm.forward(tape, Var<double>(DistTensor<double>(xs))); });
  };
  // The wrong channel count, and no spatial axis.
  EXPECT_NE(forward_on(Shape{4, 6, 5}, {0, -1, -1}).find("expected an input [N, 4"),
            std::string::npos);
  EXPECT_NE(forward_on(Shape{4, 4}, {0, -1}).find("expected an input"), std::string::npos);
  if (n >= 2) {
    // The channel axis split.
    EXPECT_NE(forward_on(Shape{2, 4, 5}, {-1, 0, -1}).find("channel axis"), std::string::npos);
    // A spatially split input on another partition than the layer's (its default, this process).
    nn::GroupNorm<double> local(2, 4);
    const TensorSpace xs(line, Decomposition::balanced(Shape{2, 4, 5}, line.shape(), {-1, -1, 0}));
    EXPECT_NE(test::error_of([&] {
                local.forward(tape, Var<double>(DistTensor<double>(xs)));
              }).find("must live on the layer's partition"),
              std::string::npos);
  }
}
