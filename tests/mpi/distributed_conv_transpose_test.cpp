// DistributedConvTranspose: equivalence with the one-rank nn::ConvTranspose (values and the input,
// weight and bias gradients) over feature, channel and general partitions at 1-3-D with stride 2
// and output_padding; adjoint tests of its linearisation in the input, weight and bias; a gradient
// check; no halo exchange where no part reads a neighbour's input; bad input an Error on every
// rank.
#include "distop/nn/distributed_conv_transpose.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distop/core/timers.hpp"
#include "distop/nn/conv_transpose.hpp"
#include "distop/nn/init.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/gradcheck.hpp"
#include "distop/testing/linearisation.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

nn::ConvTransposeOptions with_seed(nn::ConvTransposeOptions o, std::uint64_t seed) {
  o.seed = seed;
  return o;
}

struct GridCase {
  const char* name;
  int run_at;  // the world size that runs it (each runs once over the suite's 1-4 ranks)
  Shape grid;  // [P_co, P_ci, S..]
  std::vector<int> ranks;
  bool adjoint = true;  // also in the adjoint tests
};

// 2-D: feature, channel and general partitions, with idle ranks and rank orders that are not the
// identity. Each grid runs at one world size only (its own, or one that leaves ranks idle), so
// that every run of the binary stays short while the suite covers them all.
std::vector<GridCase> grid_cases_2d() {
  return {{"1x1x1x1", 1, {1, 1, 1, 1}, {0}},
          {"feature_1x2", 2, {1, 1, 1, 2}, {0, 1}},
          {"channel_out2", 2, {2, 1, 1, 1}, {1, 0}},
          {"channel_in2", 2, {1, 2, 1, 1}, {0, 1}},
          {"feature_3x1", 3, {1, 1, 3, 1}, {2, 0, 1}},
          {"general_ci2_s1x1_idle", 3, {1, 2, 1, 1}, {2, 0}},
          {"feature_2x2", 4, {1, 1, 2, 2}, {0, 1, 2, 3}},
          {"feature_1x3_idle", 4, {1, 1, 1, 3}, {3, 1, 2}, false},
          {"general_co2_s2", 4, {2, 1, 2, 1}, {3, 2, 1, 0}},
          {"general_ci2_s2", 4, {1, 2, 1, 2}, {0, 2, 1, 3}}};
}

// The grids this world size runs in the adjoint tests.
std::vector<GridCase> adjoint_grids() {
  std::vector<GridCase> out;
  for (auto& c : grid_cases_2d())
    if (c.run_at == world_size() && c.adjoint) out.push_back(std::move(c));
  return out;
}

struct ConvCase {
  const char* name;
  std::vector<std::int64_t> kernel;
  nn::ConvTransposeOptions options;
};

std::vector<ConvCase> conv_cases() {
  return {{"k3_s2_p1_op1", {3}, {.stride = 2, .padding = 1, .output_padding = 1}},
          {"k3x2_s2x1_p1x0_op1_d1x2",
           {3, 2},
           {.stride = {2, 1}, .padding = {1, 0}, .output_padding = 1, .dilation = {1, 2}}},
          {"k4_s2_p1_nobias", {4}, {.stride = 2, .padding = 1, .bias = false}}};
}

constexpr std::int64_t kBatch = 2, kIn = 3, kOut = 2;
const Shape kSpatial{6, 5};  // uneven over 4 and 3 parts
constexpr std::uint64_t kSeed = 42;

// The global values of a tensor drawn with uniform_init(seed), in a one-rank space.
DistTensor<double> global_tensor(const Shape& shape, std::uint64_t seed) {
  DistTensor<double> t(TensorSpace(shape, Partition::self(Shape(std::vector<std::int64_t>(
                                              static_cast<std::size_t>(shape.rank()), 1)))));
  nn::uniform_init(t, seed, 1.0);
  return t;
}

// Every entry of this rank's box of `got` equals the entry of `global` with the same global index.
void expect_box(const DistTensor<double>& got, const DistTensor<double>& global, const char* what) {
  const auto idx = got.space().global_indices();
  const auto v = got.local().to_vector();
  const auto g = global.local().to_vector();
  ASSERT_EQ(v.size(), idx.size()) << what;
  for (std::size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], g[static_cast<std::size_t>(idx[i])], 1e-12) << what << " entry " << i;
}

// y = layer(x) on a tape of its own, then backward from dL/dy = uniform_init(dy_seed), the same
// global values on every partitioning.
template <class Layer>
Var<double> forward_backward(Layer& layer, const Var<double>& x, std::uint64_t dy_seed) {
  Tape tape;
  Var<double> y = layer.forward(tape, x);
  nn::uniform_init(y.grad(), dy_seed, 1.0);
  tape.backward();
  return y;
}

Shape with_batch_channels(std::int64_t n, std::int64_t c, const Shape& spatial) {
  std::vector<std::int64_t> v{n, c};
  v.insert(v.end(), spatial.begin(), spatial.end());
  return Shape(v);
}

// The distributed layer against the one-rank layer made with the same seed: the same input
// (uniform_init seed 3) and output gradient (seed 4); every rank's boxes of W, y, dx, dW and db.
// Returns how many halo operations (HaloPad, HaloExchange) the distributed forward and backward
// passes ran on this rank, or -1 on a rank that holds no input.
long long expect_matches_one_rank(int dims, std::int64_t in, std::int64_t out,
                                  const std::vector<std::int64_t>& kernel,
                                  const nn::ConvTransposeOptions& options, const Partition& weights,
                                  std::int64_t batch, const Shape& spatial) {
  nn::ConvTranspose<double> ref(dims, in, out, kernel, with_seed(options, kSeed));
  Var<double> X(global_tensor(with_batch_channels(batch, in, spatial), 3), true);
  const auto Y = forward_backward(ref, X, 4);

  nn::DistributedConvTranspose<double> layer(dims, in, out, kernel, weights,
                                             with_seed(options, kSeed));
  expect_box(layer.weight().value(), ref.weight().value(), "W");
  DistTensor<double> x0(layer.input_space(batch, spatial));
  nn::uniform_init(x0, 3, 1.0);
  Var<double> x(x0, true);
  timers::reset();
  timers::enable(true);
  const auto y = forward_backward(layer, x, 4);
  timers::enable(false);
  long long halo_calls = 0;
  for (const auto& [name, e] : timers::snapshot())
    if (name.rfind("Halo", 0) == 0) halo_calls += e.calls;
  timers::reset();
  EXPECT_EQ(y.space(), layer.output_space(batch, spatial));
  EXPECT_EQ(y.space().global_shape(), Y.space().global_shape());
  expect_box(y.value(), Y.value(), "y");
  expect_box(x.grad(), X.grad(), "dx");
  expect_box(layer.weight().grad(), ref.weight().grad(), "dW");
  if (options.bias) expect_box(layer.bias().grad(), ref.bias().grad(), "db");
  return layer.input_partition().active() ? halo_calls : -1;
}

}  // namespace

// Each grid with one of the layer cases in turn (every case meets feature, channel and general
// partitions across the grids), which keeps the test short at 4 ranks.
TEST(DistributedConvTranspose, EqualsTheOneRankLayerInValuesAndGradients) {
  const auto layer_cases = conv_cases();
  const auto grids = grid_cases_2d();
  for (std::size_t g = 0; g < grids.size(); ++g) {
    const GridCase& c = grids[g];
    if (c.run_at != world_size()) continue;
    const ConvCase& cc = layer_cases[g % layer_cases.size()];
    SCOPED_TRACE(std::string(c.name) + ", " + cc.name);
    const long long halo_calls = expect_matches_one_rank(
        2, kIn, kOut, cc.kernel, cc.options, Partition::world(c.grid, c.ranks), kBatch, kSpatial);
    // Every case's outputs read across the spatial blocks: the ranks holding input run halo
    // operations exactly where a spatial axis is split.
    const bool spatial = c.grid[2] > 1 || c.grid[3] > 1;
    if (halo_calls >= 0) {
      EXPECT_EQ(halo_calls > 0, spatial);
    }
  }
}

TEST(DistributedConvTranspose, OneAndThreeSpatialAxes) {
  const int n = world_size();
  // 1-D over every rank (halos both ways: kernel 5, stride 2); 3-D with the last two axes split.
  expect_matches_one_rank(1, 2, 3, {5}, {.stride = 2, .padding = 1, .output_padding = 1},
                          Partition::world(Shape{1, 1, n}), 2, Shape{3 * n + 1});
  if (n >= 2) {
    expect_matches_one_rank(
        3, 2, 2, {3, 2, 3},
        {.stride = {1, 2, 2}, .padding = {1, 0, 1}, .output_padding = {0, 1, 1}},
        Partition::world(Shape{1, 1, 1, 2, n / 2}), 1, Shape{2, 3, 2 * n});
  }
}

// The linearisation in x, W and b (each affine with the others fixed) against its tape adjoint.
// In the weight and the bias on the last grid only, when `parameters` (their gradients are compared
// with one rank's on every grid).
template <class T>
void adjoint_cases(const std::vector<GridCase>& grids, bool parameters) {
  const auto cc = conv_cases()[1];
  for (const auto& c : grids) {
    SCOPED_TRACE(c.name);
    nn::DistributedConvTranspose<T> layer(
        2, kIn, kOut, cc.kernel, Partition::world(c.grid, c.ranks), with_seed(cc.options, kSeed));
    DistTensor<T> x0(layer.input_space(kBatch, kSpatial));
    nn::uniform_init(x0, 3, 1.0);
    Var<T> x(x0, true);
    const auto out = layer.output_space(kBatch, kSpatial);
    distop::testing::TapeLinearisation<T> wrt_x(x, out,
                                                [&](Tape& t) { return layer.forward(t, x); });
    const auto rx = distop::testing::adjoint_test(wrt_x);
    EXPECT_TRUE(rx.passed) << "input: " << rx.str();
    if (!parameters || &c != &grids.back()) continue;
    Var<T> x_fixed(x0.clone(), false);
    distop::testing::TapeLinearisation<T> wrt_w(layer.weight(), out,
                                                [&](Tape& t) { return layer.forward(t, x_fixed); });
    const auto rw = distop::testing::adjoint_test(wrt_w);
    EXPECT_TRUE(rw.passed) << "weight: " << rw.str();
    distop::testing::TapeLinearisation<T> wrt_b(layer.bias(), out,
                                                [&](Tape& t) { return layer.forward(t, x_fixed); });
    const auto rb = distop::testing::adjoint_test(wrt_b);
    EXPECT_TRUE(rb.passed) << "bias: " << rb.str();
  }
}

TEST(DistributedConvTransposeAdjoint, Double) { adjoint_cases<double>(adjoint_grids(), true); }
TEST(DistributedConvTransposeAdjoint, Float) {
  adjoint_cases<float>({adjoint_grids().back()}, false);
}

TEST(DistributedConvTranspose, GradientsMatchFiniteDifferences) {
  const int n = world_size();
  // One seeded entry of each input on each rank (every checked entry costs two collective passes;
  // the equivalence and adjoint tests cover every entry).
  const Shape grid = n >= 2 ? Shape{1, 1, 2, n / 2} : Shape{1, 1, 1, 1};
  nn::DistributedConvTranspose<double> layer(
      2, 2, 2, {3}, Partition::world(grid, n == 3 ? std::vector<int>{0, 2} : std::vector<int>{}),
      {.stride = 2, .padding = 1, .output_padding = 1, .seed = 5});
  DistTensor<double> x0(layer.input_space(1, Shape{4, 4}));
  nn::uniform_init(x0, 6, 1.0);
  Var<double> x(x0, true);
  const auto report =
      distop::testing::gradcheck([&](Tape& t) { return layer.forward(t, x); },
                                 {x, layer.weight(), layer.bias()}, {.max_entries = 1});
  EXPECT_TRUE(report.passed) << report.str();
}

// A kernel of 2 with stride 2 (a U-Net's upsampling) over blocks that split the outputs evenly:
// each part's outputs come from its own inputs alone, so there is no HaloExchange (the layer cases
// above, whose kernels cross the blocks, have one).
TEST(DistributedConvTranspose, ExchangesNoHalosWhereOutputsNeedOnlyTheirOwnInputs) {
  const int n = world_size();
  // 24 outputs: even blocks of inputs and outputs at 1-4 ranks.
  EXPECT_EQ(expect_matches_one_rank(2, 2, 2, {2}, {.stride = 2},
                                    Partition::world(Shape{1, 1, n, 1}), 1, Shape{12, 3}),
            0);
}

TEST(DistributedConvTranspose, BadInputsAreErrorsOnEveryRank) {
  const int n = world_size();
  const nn::ConvTransposeOptions o{.stride = 2, .padding = 1, .output_padding = 1};
  // A weight grid of the wrong rank; more channel blocks than channels; a bad output padding.
  EXPECT_THROW(nn::DistributedConvTranspose<float>(2, 2, 2, {3}, Partition::world(Shape{1, n}), o),
               Error);
  if (n > 1) {
    EXPECT_THROW(
        nn::DistributedConvTranspose<float>(2, 1, 2, {3}, Partition::world(Shape{1, n, 1, 1}), o),
        Error);
  }
  const Partition rows = Partition::world(Shape{1, 1, n, 1});
  EXPECT_THROW(
      nn::DistributedConvTranspose<float>(2, 2, 2, {3}, rows, {.stride = 2, .output_padding = 2}),
      Error);
  // A kernel of 9 (stride 1, no padding): 2 n + 8 outputs from 2 n inputs.
  nn::DistributedConvTranspose<float> layer(2, 2, 3, {9}, rows, {.seed = 1});
  Tape tape;
  // Wrong channel count.
  Var<float> wrong(DistTensor<float>(TensorSpace(Shape{2, 3, 4 * n, 5}, rows)));
  EXPECT_THROW(layer.forward(tape, wrong), Error);
  // Wrong rank.
  Var<float> flat(
      DistTensor<float>(TensorSpace(Shape{2, 2, 4 * n}, Partition::world(Shape{1, 1, n}))));
  EXPECT_THROW(layer.forward(tape, flat), Error);
  // The right shape on another partition.
  if (n > 1) {
    Var<float> elsewhere(
        DistTensor<float>(TensorSpace(Shape{2, 2, 5, 4 * n}, Partition::world(Shape{1, 1, 1, n}))));
    EXPECT_THROW(layer.forward(tape, elsewhere), Error);
  }
  // Inputs beyond the adjacent neighbour: the kernel of 9 over blocks of 2 inputs (with two parts
  // the neighbour holds everything else, so this needs three).
  if (n > 2) {
    Var<float> small(DistTensor<float>(layer.input_space(1, Shape{2 * n, 3})));
    const std::string message = distop::test::error_of([&] { layer.forward(tape, small); });
    EXPECT_NE(message.find("neighbour"), std::string::npos) << message;
  }
}
