// DistributedLinear: adjoint tests of its linearisation with respect to input, weight and bias,
// and equivalence with the same layer computed on one rank (values and gradients).
#include "distop/nn/distributed_linear.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "distop/autodiff/apply.hpp"
#include "distop/nn/init.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/linearisation.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

struct GridCase {
  const char* name;
  int ranks_needed;
  Shape grid;
  std::vector<int> ranks;
};

std::vector<GridCase> grid_cases() {
  return {{"1x1", 1, {1, 1}, {0}},
          {"1x2", 2, {1, 2}, {0, 1}},
          {"2x1", 2, {2, 1}, {1, 0}},
          {"2x2", 4, {2, 2}, {0, 1, 2, 3}},
          {"1x3_idle", 4, {1, 3}, {1, 2, 3}},
          {"3x1_idle", 4, {3, 1}, {3, 1, 0}},
          {"2x2_transposed", 4, {2, 2}, {0, 2, 1, 3}}};
}

constexpr std::int64_t kIn = 7, kOut = 5, kBatch = 3;
constexpr std::uint64_t kSeed = 42;

template <class T>
void adjoint_cases() {
  for (const auto& c : grid_cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    nn::DistributedLinear<T> layer(kIn, kOut, Partition::world(c.grid, c.ranks), {.seed = kSeed});
    DistTensor<T> x0(layer.input_space(kBatch));
    nn::uniform_init(x0, 3, 1.0);
    Var<T> x(x0, true);
    const auto out = layer.output_space(kBatch);
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

// Everything the one-rank reference needs, from the same seeds.
std::vector<double> global_values(const Shape& shape, std::uint64_t seed, double bound) {
  DistTensor<double> t(TensorSpace(shape, Partition::self(Shape(std::vector<std::int64_t>(
                                              static_cast<std::size_t>(shape.rank()), 1)))));
  nn::uniform_init(t, seed, bound);
  return t.local().to_vector();
}

void expect_box(const DistTensor<double>& got, const std::vector<double>& global,
                const char* what) {
  auto idx = got.space().global_indices();
  auto v = got.local().to_vector();
  ASSERT_EQ(v.size(), idx.size()) << what;
  for (std::size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], global[static_cast<std::size_t>(idx[i])], 1e-12) << what << " entry " << i;
}

}  // namespace

TEST(DistributedLinearAdjoint, Double) { adjoint_cases<double>(); }
TEST(DistributedLinearAdjoint, Float) { adjoint_cases<float>(); }

TEST(DistributedLinear, EqualsTheOneRankLayerInValuesAndGradients) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(kIn));
  const auto W = global_values(Shape{kOut, kIn}, nn::parameter_seed(kSeed, "weight"), bound);
  const auto b = global_values(Shape{kOut}, nn::parameter_seed(kSeed, "bias"), bound);
  const auto X = global_values(Shape{kBatch, kIn}, 3, 1.0);
  const auto R = global_values(Shape{kBatch, kOut}, 4, 1.0);  // dL/dy
  std::vector<double> Y(kBatch * kOut), dX(kBatch * kIn, 0), dW(kOut * kIn, 0), db(kOut, 0);
  for (int i = 0; i < kBatch; ++i)
    for (int o = 0; o < kOut; ++o) {
      double s = b[o];
      for (int k = 0; k < kIn; ++k) s += X[i * kIn + k] * W[o * kIn + k];
      Y[i * kOut + o] = s;
      db[o] += R[i * kOut + o];
      for (int k = 0; k < kIn; ++k) {
        dX[i * kIn + k] += R[i * kOut + o] * W[o * kIn + k];
        dW[o * kIn + k] += R[i * kOut + o] * X[i * kIn + k];
      }
    }
  for (const auto& c : grid_cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    nn::DistributedLinear<double> layer(kIn, kOut, Partition::world(c.grid, c.ranks),
                                        {.seed = kSeed});
    DistTensor<double> x0(layer.input_space(kBatch));
    nn::uniform_init(x0, 3, 1.0);
    Var<double> x(x0, true);
    Tape tape;
    auto y = layer.forward(tape, x);
    expect_box(y.value(), Y, "y");
    nn::uniform_init(y.grad(), 4, 1.0);
    tape.backward();
    expect_box(x.grad(), dX, "dx");
    expect_box(layer.weight().grad(), dW, "dW");
    expect_box(layer.bias().grad(), db, "db");
  }
}

TEST(DistributedLinear, BadInputsAreErrorsOnEveryRank) {
  const int n = world_size();
  nn::DistributedLinear<float> layer(kIn, kOut, Partition::world(Shape{1, n}), {.seed = kSeed});
  Tape tape;
  // Wrong feature count.
  Var<float> wrong(DistTensor<float>(TensorSpace(Shape{kBatch, kIn + 1}, layer.input_partition())));
  EXPECT_THROW(layer.forward(tape, wrong), Error);
  // Right shape, wrong partition (all ranks in one grid row instead of P_x).
  if (n > 1) {
    Var<float> elsewhere(
        DistTensor<float>(TensorSpace(Shape{8, kIn}, Partition::world(Shape{n, 1}))));
    EXPECT_THROW(layer.forward(tape, elsewhere), Error);
  }
  // A weight grid that is not 2-D, or splits the features into empty blocks.
  EXPECT_THROW(nn::DistributedLinear<float>(kIn, kOut, Partition::world(Shape{n}), {.seed = kSeed}),
               Error);
  if (n > 1) {
    EXPECT_THROW(
        nn::DistributedLinear<float>(1, kOut, Partition::world(Shape{1, n}), {.seed = kSeed}),
        Error);
  }
}
