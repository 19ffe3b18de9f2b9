// DistributedConv and DistributedPool: adjoint tests of the convolution's linearisation with
// respect to input, weight and bias, and equivalence with the one-rank layers (values and
// gradients) over feature, channel and general partitions, uneven extents and strides that do not
// divide them.
#include "distop/nn/distributed_conv.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/timers.hpp"
#include "distop/nn/conv.hpp"
#include "distop/nn/distributed_pool.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/pool.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/linearisation.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

// The options with the layer's seed set (the seed is one of the options).
distop::nn::ConvOptions with_seed(distop::nn::ConvOptions o, std::uint64_t seed) {
  o.seed = seed;
  return o;
}

struct GridCase {
  const char* name;
  int ranks_needed;
  Shape grid;  // [P_co, P_ci, S..]
  std::vector<int> ranks;
};

// 2-D convolutions: feature, channel and general partitions, with idle ranks and a rank order
// that is not the identity.
std::vector<GridCase> grid_cases_2d() {
  return {{"1x1x1x1", 1, {1, 1, 1, 1}, {0}},
          {"feature_1x2", 2, {1, 1, 1, 2}, {0, 1}},
          {"feature_2x1_reversed", 2, {1, 1, 2, 1}, {1, 0}},
          {"channel_out2", 2, {2, 1, 1, 1}, {0, 1}},
          {"channel_in2", 2, {1, 2, 1, 1}, {1, 0}},
          {"feature_2x2", 4, {1, 1, 2, 2}, {0, 1, 2, 3}},
          {"feature_1x3_idle", 4, {1, 1, 1, 3}, {3, 1, 2}},
          {"channel_2x2", 4, {2, 2, 1, 1}, {0, 2, 1, 3}},
          {"general_co2_s2", 4, {2, 1, 2, 1}, {0, 1, 2, 3}},
          {"general_ci2_s2", 4, {1, 2, 1, 2}, {3, 2, 1, 0}}};
}

struct ConvCase {
  const char* name;
  std::vector<std::int64_t> kernel;
  nn::ConvOptions options;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"k3_p1", {3}, {.padding = 1}},
      {"k3x2_s2x1_p1x0_d1x2", {3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}}},
      {"k5_p2_nobias", {5}, {.padding = 2, .bias = false}}};
}

constexpr std::int64_t kBatch = 2, kIn = 3, kOut = 4;
const Shape kSpatial{9, 7};  // uneven over 2 and 3 parts
constexpr std::uint64_t kSeed = 42;

// The global values of a tensor drawn with uniform_init(seed, bound), in a one-rank space.
template <class T>
DistTensor<T> global_tensor(const Shape& shape, std::uint64_t seed, double bound = 1.0) {
  DistTensor<T> t(TensorSpace(shape, Partition::self(Shape(std::vector<std::int64_t>(
                                         static_cast<std::size_t>(shape.rank()), 1)))));
  nn::uniform_init(t, seed, bound);
  return t;
}

// Every entry of this rank's box of `got` equals the entry of `global` with the same global index.
void expect_box(const DistTensor<double>& got, const DistTensor<double>& global, const char* what,
                double tol = 1e-12) {
  auto idx = got.space().global_indices();
  auto v = got.local().to_vector();
  auto g = global.local().to_vector();
  ASSERT_EQ(v.size(), idx.size()) << what;
  for (std::size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], g[static_cast<std::size_t>(idx[i])], tol) << what << " entry " << i;
}

// y = layer(x) on a tape of its own, then backward from dL/dy drawn with uniform_init(dy_seed),
// which fills every partitioning of a tensor with the same global values: a one-rank layer and
// its distributed counterpart run alike from the same seeds.
template <class Layer>
Var<double> forward_backward(Layer& layer, const Var<double>& x, std::uint64_t dy_seed) {
  Tape tape;
  Var<double> y = layer.forward(tape, x);
  nn::uniform_init(y.grad(), dy_seed, 1.0);
  tape.backward();
  return y;
}

// The distributed layer against its one-rank reference `ref`, which ran forward_backward(ref, X,
// 4) to Y: the same input (uniform_init seed 3) and output gradient, then every rank's boxes of y,
// dx, dW and (with a bias) db against the reference's whole tensors.
void expect_conv_matches(nn::DistributedConv<double>& layer, std::int64_t batch,
                         const Shape& spatial, nn::Conv<double>& ref, const Var<double>& X,
                         const Var<double>& Y, bool bias) {
  DistTensor<double> x0(layer.input_space(batch, spatial));
  nn::uniform_init(x0, 3, 1.0);
  Var<double> x(x0, true);
  const auto y = forward_backward(layer, x, 4);
  ASSERT_EQ(y.space(), layer.output_space(batch, spatial));
  expect_box(y.value(), Y.value(), "y");
  expect_box(x.grad(), X.grad(), "dx");
  expect_box(layer.weight().grad(), ref.weight().grad(), "dW");
  if (bias) expect_box(layer.bias().grad(), ref.bias().grad(), "db");
}

Shape with_batch_channels(std::int64_t n, std::int64_t c, const Shape& spatial) {
  std::vector<std::int64_t> v{n, c};
  v.insert(v.end(), spatial.begin(), spatial.end());
  return Shape(v);
}

}  // namespace

TEST(DistributedConv, EqualsTheOneRankLayerInValuesAndGradients) {
  for (const auto& cc : conv_cases()) {
    SCOPED_TRACE(cc.name);
    // The one-rank reference, computed on every rank.
    nn::Conv<double> ref(2, kIn, kOut, cc.kernel, with_seed(cc.options, kSeed));
    const Shape xs = with_batch_channels(kBatch, kIn, kSpatial);
    Var<double> X(global_tensor<double>(xs, 3), true);
    const auto Y = forward_backward(ref, X, 4);

    for (const auto& c : grid_cases_2d()) {
      if (world_size() < c.ranks_needed) continue;
      SCOPED_TRACE(c.name);
      nn::DistributedConv<double> layer(2, kIn, kOut, cc.kernel, Partition::world(c.grid, c.ranks),
                                        with_seed(cc.options, kSeed));
      expect_box(layer.weight().value(), ref.weight().value(), "W");
      expect_conv_matches(layer, kBatch, kSpatial, ref, X, Y, cc.options.bias);
    }
  }
}

template <class T>
void adjoint_cases() {
  const auto cc = conv_cases()[1];
  for (const auto& c : grid_cases_2d()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    nn::DistributedConv<T> layer(2, kIn, kOut, cc.kernel, Partition::world(c.grid, c.ranks),
                                 with_seed(cc.options, kSeed));
    DistTensor<T> x0(layer.input_space(kBatch, kSpatial));
    nn::uniform_init(x0, 3, 1.0);
    Var<T> x(x0, true);
    const auto out = layer.output_space(kBatch, kSpatial);
    distop::testing::TapeLinearisation<T> wrt_x(x, out,
                                                [&](Tape& t) { return layer.forward(t, x); });
    auto rx = distop::testing::adjoint_test(wrt_x);
    EXPECT_TRUE(rx.passed) << "input: " << rx.str();
    Var<T> x_fixed(x0.clone(), false);
    distop::testing::TapeLinearisation<T> wrt_w(layer.weight(), out,
                                                [&](Tape& t) { return layer.forward(t, x_fixed); });
    auto rw = distop::testing::adjoint_test(wrt_w);
    EXPECT_TRUE(rw.passed) << "weight: " << rw.str();
    distop::testing::TapeLinearisation<T> wrt_b(layer.bias(), out,
                                                [&](Tape& t) { return layer.forward(t, x_fixed); });
    auto rb = distop::testing::adjoint_test(wrt_b);
    EXPECT_TRUE(rb.passed) << "bias: " << rb.str();
  }
}

TEST(DistributedConvAdjoint, Double) { adjoint_cases<double>(); }
TEST(DistributedConvAdjoint, Float) { adjoint_cases<float>(); }

TEST(DistributedConv, OneAndThreeSpatialAxes) {
  const int n = world_size();
  // 1-D over every rank, 3-D with the last two axes split.
  struct Case {
    int dims;
    Shape grid;
    Shape spatial;
  };
  std::vector<Case> cases{{1, Shape{1, 1, n}, Shape{4 * n + 1}}};
  if (n >= 2) cases.push_back({3, Shape{1, 1, 1, 2, n / 2}, Shape{3, 5, 2 * n + 1}});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.dims);
    nn::ConvOptions o{.padding = 1};
    nn::Conv<double> ref(c.dims, 2, 3, {3}, with_seed(o, kSeed));
    Var<double> X(global_tensor<double>(with_batch_channels(2, 2, c.spatial), 3), true);
    const auto Y = forward_backward(ref, X, 4);
    nn::DistributedConv<double> layer(c.dims, 2, 3, {3}, Partition::world(c.grid),
                                      with_seed(o, kSeed));
    expect_conv_matches(layer, 2, c.spatial, ref, X, Y, o.bias);
  }
}

TEST(DistributedPool, EqualsTheOneRankLayerInValuesAndGradients) {
  const int n = world_size();
  struct Case {
    const char* name;
    nn::PoolKind kind;
    std::vector<std::int64_t> kernel;
    nn::PoolOptions options;
  };
  const std::vector<Case> cases{
      {"max2", nn::PoolKind::max, {2}, {}},
      {"max3_s2_p1", nn::PoolKind::max, {3}, {.stride = 2, .padding = 1}},
      {"avg3x2_s2x1_p1x0", nn::PoolKind::avg, {3, 2}, {.stride = {2, 1}, .padding = {1, 0}}},
      {"max2_d2", nn::PoolKind::max, {2}, {.stride = 1, .dilation = 2}}};
  // Grids over every rank, and at 3 ranks and more one of two ranks in reverse order whose other
  // ranks are idle (they hold nothing, compute nothing, and get empty gradients).
  std::vector<std::pair<Shape, std::vector<int>>> grids{{Shape{1, 1, 1, n}, {}},
                                                        {Shape{1, 1, n, 1}, {}}};
  if (n == 4) grids.push_back({Shape{1, 2, 2, 1}, {}});
  if (n >= 3) grids.push_back({Shape{1, 1, 2, 1}, {n - 1, 0}});
  const Shape xs = with_batch_channels(kBatch, kIn, Shape{11, 9});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    nn::Pool<double> ref(c.kind, 2, c.kernel, c.options);
    // Distinct values (no ties), so the max is the same wherever it is computed.
    Var<double> X(global_tensor<double>(xs, 5), true);
    const auto Y = forward_backward(ref, X, 6);
    for (const auto& [grid, ranks] : grids) {
      SCOPED_TRACE(grid.str());
      nn::DistributedPool<double> layer(c.kind, 2, c.kernel, c.options);
      DistTensor<double> x0(TensorSpace(xs, Partition::world(grid, ranks)));
      nn::uniform_init(x0, 5, 1.0);
      Var<double> x(x0, true);
      const auto y = forward_backward(layer, x, 6);
      ASSERT_EQ(y.space(), layer.output_space(x.space()));
      expect_box(y.value(), Y.value(), "y");
      expect_box(x.grad(), X.grad(), "dx");
    }
  }
}

// Windows whose halo is zero on one side, or negative (owned input that no output reads, which
// the layer trims), or that read only padding on some parts: strides larger than the kernel,
// padding larger than the kernel's reach, dilation. Convolution and max pooling along each spatial
// axis in turn, against the one-rank layers.
TEST(DistributedConv, SurplusAndOneSidedHalos) {
  const int n = world_size();
  const std::vector<ConvWindow> windows{{1, 3, 0, 1}, {2, 3, 0, 1}, {3, 2, 0, 2},
                                        {4, 3, 2, 1}, {3, 1, 3, 1}, {2, 2, 1, 2}};
  const Shape spatial{13, 11};
  const Shape xs = with_batch_channels(2, 3, spatial);
  for (const auto& w : windows) {
    SCOPED_TRACE(w.str());
    const nn::ConvOptions o{.stride = w.stride, .padding = w.padding, .dilation = w.dilation};
    nn::Conv<double> ref(2, 3, 2, {w.kernel}, with_seed(o, kSeed));
    Var<double> X(global_tensor<double>(xs, 3), true);
    const auto Y = forward_backward(ref, X, 4);
    const bool poolable = 2 * w.padding <= w.kernel;
    const nn::PoolOptions po{.stride = w.stride, .padding = w.padding, .dilation = w.dilation};
    Var<double> Xp(global_tensor<double>(xs, 5), true);
    Var<double> Yp;
    if (poolable) {
      nn::Pool<double> ref_pool(nn::PoolKind::max, 2, {w.kernel}, po);
      Yp = forward_backward(ref_pool, Xp, 6);
    }
    for (const Shape& grid : {Shape{1, 1, n, 1}, Shape{1, 1, 1, n}}) {
      SCOPED_TRACE(grid.str());
      nn::DistributedConv<double> layer(2, 3, 2, {w.kernel}, Partition::world(grid),
                                        with_seed(o, kSeed));
      expect_conv_matches(layer, 2, spatial, ref, X, Y, o.bias);
      if (!poolable) continue;
      nn::DistributedPool<double> pool(nn::PoolKind::max, 2, {w.kernel}, po);
      DistTensor<double> p0(TensorSpace(xs, Partition::world(grid)));
      nn::uniform_init(p0, 5, 1.0);
      Var<double> xp(p0, true);
      const auto yp = forward_backward(pool, xp, 6);
      expect_box(yp.value(), Yp.value(), "pooled y");
      expect_box(xp.grad(), Xp.grad(), "pooled dx");
    }
  }
}

// Windows that stay inside every rank's block (2 x 2 pooling, each block twice its outputs) need no
// halo: the layer runs no HaloExchange and no HaloPad (no copy of its input); windows that cross
// the blocks do, as soon as the height is split.
TEST(DistributedPool, ExchangesHalosOnlyWhereWindowsCrossBlocks) {
  const int n = world_size();
  const Shape xs = with_batch_channels(2, 2, Shape{24, 4});  // 12 outputs: even blocks at 1-4 ranks
  auto halo_calls = [&](const nn::PoolOptions& options, std::vector<std::int64_t> kernel) {
    nn::DistributedPool<double> layer(nn::PoolKind::max, 2, kernel, options);
    DistTensor<double> x0(TensorSpace(xs, Partition::world(Shape{1, 1, n, 1})));
    nn::uniform_init(x0, 3, 1.0);
    Var<double> x(x0, true);
    timers::reset();
    timers::enable(true);
    forward_backward(layer, x, 4);
    timers::enable(false);
    long long calls = 0;
    for (const auto& [name, e] : timers::snapshot())
      if (name.rfind("Halo", 0) == 0) calls += e.calls;
    timers::reset();
    return calls;
  };
  EXPECT_EQ(halo_calls({}, {2}), 0);
  const long long crossing = halo_calls({.stride = 2, .padding = 1}, {3});
  if (n > 1)
    EXPECT_GT(crossing, 0);
  else
    EXPECT_EQ(crossing, 0);
}

TEST(DistributedPoolAdjoint, AveragePoolingIsLinear) {
  const int n = world_size();
  nn::DistributedPool<double> layer(nn::PoolKind::avg, 2, {3}, {.stride = 2, .padding = 1});
  DistTensor<double> x0(
      TensorSpace(with_batch_channels(2, 2, Shape{9, 8}), Partition::world(Shape{1, 1, n, 1})));
  Var<double> x(x0, true);
  distop::testing::TapeLinearisation<double> op(x, layer.output_space(x.space()),
                                                [&](Tape& t) { return layer.forward(t, x); });
  auto r = distop::testing::adjoint_test(op);
  EXPECT_TRUE(r.passed) << r.str();
}

TEST(DistributedConv, BadInputsAreErrorsOnEveryRank) {
  const int n = world_size();
  const nn::ConvOptions o{.padding = 1};
  // A weight grid of the wrong rank; more channel blocks than channels.
  EXPECT_THROW(
      nn::DistributedConv<float>(2, 2, 2, {3}, Partition::world(Shape{1, n}), with_seed(o, 1)),
      Error);
  if (n > 1) {
    EXPECT_THROW(nn::DistributedConv<float>(2, 1, 2, {3}, Partition::world(Shape{1, n, 1, 1}),
                                            with_seed(o, 1)),
                 Error);
  }
  nn::DistributedConv<float> layer(2, 2, 3, {3}, Partition::world(Shape{1, 1, n, 1}),
                                   with_seed(o, 1));
  Tape tape;
  // Wrong channel count.
  Var<float> wrong(
      DistTensor<float>(TensorSpace(Shape{2, 3, 4 * n, 5}, Partition::world(Shape{1, 1, n, 1}))));
  EXPECT_THROW(layer.forward(tape, wrong), Error);
  // Right shape on another partition.
  if (n > 1) {
    Var<float> elsewhere(
        DistTensor<float>(TensorSpace(Shape{2, 2, 5, 4 * n}, Partition::world(Shape{1, 1, 1, n}))));
    EXPECT_THROW(layer.forward(tape, elsewhere), Error);
  }
  // A halo wider than the neighbour's block: a 9-wide kernel over blocks of 2 (with two parts the
  // neighbour holds everything else, so this needs three).
  if (n > 2) {
    nn::DistributedConv<float> wide(2, 2, 3, {9}, Partition::world(Shape{1, 1, n, 1}),
                                    {.padding = 4, .seed = 1});
    Var<float> small(DistTensor<float>(wide.input_space(1, Shape{2 * n, 9})));
    EXPECT_THROW(wide.forward(tape, small), Error);
  }
}

TEST(HaloPadAdjoint, EmbeddingAndRestriction) {
  const int n = world_size();
  for (const Shape& grid : {Shape{1, 1, n, 1}, Shape{1, 1, 1, n}}) {
    SCOPED_TRACE(grid.str());
    TensorSpace interior(with_batch_channels(2, 2, Shape{3 * n + 1, 3 * n}),
                         Partition::world(grid));
    auto halo = std::make_shared<const HaloExchange<double>>(
        interior, std::vector<ConvWindow>{{}, {}, {3, 1, 1, 1}, {3, 1, 1, 1}});
    HaloPad<double> pad(halo);
    auto r = distop::testing::adjoint_test(pad);
    EXPECT_TRUE(r.passed) << r.str();
    // forward overwrites all of y: the block where it belongs, zero everywhere else.
    DistTensor<double> x(pad.domain());
    x.local().fill(1.0);
    DistTensor<double> y(pad.range());
    y.local().fill(std::numeric_limits<double>::quiet_NaN());
    pad.forward(x, y);
    double sum = 0;
    for (double v : y.local().to_vector()) {
      EXPECT_TRUE(v == 0.0 || v == 1.0) << v;
      sum += v;
    }
    EXPECT_EQ(sum, static_cast<double>(x.local_numel()));
  }
}

TEST(DistributedPool, BadInputsAreErrorsOnEveryRank) {
  const int n = world_size();
  nn::DistributedPool<float> pool(nn::PoolKind::max, 2, {2});
  Tape tape;
  // Wrong rank: a 2-D pooling of a [N, C, L] tensor.
  Var<float> flat(
      DistTensor<float>(TensorSpace(Shape{2, 2, 4 * n}, Partition::world(Shape{1, 1, n}))));
  EXPECT_THROW(pool.forward(tape, flat), Error);
  // A grid that does not split tensor axis a by grid axis a.
  Var<float> mapped(DistTensor<float>(
      TensorSpace(Partition::world(Shape{n}),
                  Decomposition::balanced(Shape{2, 2, 4 * n, 4}, Shape{n}, {-1, -1, 0, -1}))));
  EXPECT_THROW(pool.forward(tape, mapped), Error);
  // Invalid windows: padding beyond half the kernel.
  EXPECT_THROW(nn::DistributedPool<float>(nn::PoolKind::max, 2, {2}, {.padding = 2}), Error);
}
