// DistributedBatchNorm against the one-rank BatchNorm on the whole tensor: output, input gradient,
// weight and bias gradients, running statistics, an SGD step and evaluation mode, over batch,
// spatial and mixed partitions with uneven blocks and idle ranks; and bad partitions.
#include "distop/nn/batch_norm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/optim/sgd.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

Shape ones(int rank) { return Shape(std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1)); }

// Weight 0.5 + 0.25 c, bias 0.1 c - 0.2: the same on every rank and in the reference.
template <class Layer>
void set_affine(Layer& bn) {
  const std::int64_t c = bn.channels();
  std::vector<double> w, b;
  for (std::int64_t k = 0; k < c; ++k) {
    w.push_back(0.5 + 0.25 * static_cast<double>(k));
    b.push_back(0.1 * static_cast<double>(k) - 0.2);
  }
  if (bn.weight().value().local_numel() == 0) return;  // outside the partition
  using T = typename std::remove_reference_t<decltype(bn.weight().value().local())>::value_type;
  bn.weight().value().local().copy_from(
      Tensor<T>::from_vector(Shape{c}, std::vector<T>(w.begin(), w.end())));
  bn.bias().value().local().copy_from(
      Tensor<T>::from_vector(Shape{c}, std::vector<T>(b.begin(), b.end())));
}

// The entries of a whole tensor (host values) that `space`'s box on this rank holds.
std::vector<double> box_of(const std::vector<double>& whole, const TensorSpace& space) {
  std::vector<double> v;
  for (std::int64_t g : space.global_indices()) v.push_back(whole[static_cast<std::size_t>(g)]);
  return v;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& expected,
                 const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-12 * std::max(1.0, std::abs(expected[i])))
        << what << ", entry " << i << " on rank " << world_rank();
}

struct Case {
  Shape global;
  Shape grid;
};

void check_case(const Case& c) {
  SCOPED_TRACE("global " + c.global.str() + " on grid " + c.grid.str());
  const std::int64_t channels = c.global[1];

  // The reference: the one-rank layer on the whole tensor, on every rank.
  const TensorSpace full(c.global, Partition::self(ones(c.global.rank())));
  nn::BatchNorm<double> ref(channels);
  set_affine(ref);
  Var<double> xr(test::random_tensor<double>(full, 101, -1.0, 3.0), true);
  const auto rr = test::random_tensor<double>(full, 103);
  Var<double> yr;
  {
    Tape tape;
    yr = ref.forward(tape, xr);
    auto l = test::weighted_sum(tape, yr, rr);
    backward(tape, l);
  }

  const Partition p = Partition::world(c.grid);
  const TensorSpace xs(c.global, p);
  nn::DistributedBatchNorm<double> bn(channels, p);
  set_affine(bn);
  Var<double> x(test::random_tensor<double>(xs, 101, -1.0, 3.0), true);
  const auto r = test::random_tensor<double>(xs, 103);
  Var<double> y;
  {
    Tape tape;
    y = bn.forward(tape, x);
    auto l = test::weighted_sum(tape, y, r);
    backward(tape, l);
  }
  expect_near(y.value().local().to_vector(), box_of(yr.value().local().to_vector(), xs), "output");
  expect_near(x.grad().local().to_vector(), box_of(xr.grad().local().to_vector(), xs),
              "input gradient");
  if (p.active()) {
    expect_near(bn.weight().grad().local().to_vector(), ref.weight().grad().local().to_vector(),
                "weight gradient");
    expect_near(bn.bias().grad().local().to_vector(), ref.bias().grad().local().to_vector(),
                "bias gradient");
    expect_near(bn.running_mean().local().to_vector(), ref.running_mean().local().to_vector(),
                "running mean");
    expect_near(bn.running_var().local().to_vector(), ref.running_var().local().to_vector(),
                "running variance");
  } else {
    EXPECT_EQ(bn.weight().grad().local_numel(), 0);
    EXPECT_EQ(y.value().local_numel(), 0);
  }

  // One SGD step on each keeps every copy equal to the one-rank layer's.
  optim::SGD<double> opt(bn.parameters(), {0.5});
  optim::SGD<double> opt_ref(ref.parameters(), {0.5});
  opt.step();
  opt_ref.step();
  if (p.active()) {
    expect_near(bn.weight().value().local().to_vector(), ref.weight().value().local().to_vector(),
                "weight after a step");
    expect_near(bn.bias().value().local().to_vector(), ref.bias().value().local().to_vector(),
                "bias after a step");
  }

  // Evaluation mode: the running statistics, no messages in forward.
  bn.eval();
  ref.eval();
  Tape tape;
  const auto ye = bn.forward(tape, Var<double>(x.value())).value().local().to_vector();
  const auto ye_ref = ref.forward(tape, Var<double>(xr.value())).value().local().to_vector();
  expect_near(ye, box_of(ye_ref, xs), "evaluation output");
}

std::vector<Case> cases() {
  const auto n = static_cast<std::int64_t>(world_size());
  std::vector<Case> v{
      {Shape{5, 3, 7}, Shape{n, 1, 1}},  // batch split, uneven from 2 ranks on
      {Shape{2, 3, 9}, Shape{1, 1, n}},  // spatial split, uneven at 2 and 4
      {Shape{7, 3}, Shape{n, 1}},        // [N, C]
  };
  if (n == 4) {
    v.push_back({Shape{3, 3, 5}, Shape{2, 1, 2}});        // batch and spatial
    v.push_back({Shape{2, 2, 5, 3}, Shape{1, 1, 2, 2}});  // two spatial axes
  }
  if (n >= 3) v.push_back({Shape{5, 3, 4}, Shape{2, 1, 1}});  // idle ranks
  return v;
}

TEST(DistributedBatchNorm, MatchesTheOneRankLayer) {
  for (const Case& c : cases()) check_case(c);
}

// The float layer (the one training runs) gives the double layer's outputs and gradients on the
// same partitions, in training and in evaluation mode.
TEST(DistributedBatchNorm, FloatMatchesDouble) {
  for (const Case& c : cases()) {
    SCOPED_TRACE("global " + c.global.str() + " on grid " + c.grid.str());
    const Partition p = Partition::world(c.grid);
    nn::DistributedBatchNorm<float> bf(c.global[1], p);
    nn::DistributedBatchNorm<double> bd(c.global[1], p);
    set_affine(bf);
    set_affine(bd);
    for (const bool training : {true, false}) {
      SCOPED_TRACE(training ? "training" : "evaluation");
      bf.train(training);
      bd.train(training);
      for (auto* v : {&bf.weight(), &bf.bias()}) v->zero_grad();
      for (auto* v : {&bd.weight(), &bd.bias()}) v->zero_grad();
      test::expect_float_matches_double(
          TensorSpace(c.global, p), [&](Tape& t, const Var<double>& x) { return bd.forward(t, x); },
          [&](Tape& t, const Var<float>& x) { return bf.forward(t, x); }, 1e-5, 107, -1.0, 3.0);
      if (!p.active()) continue;
      test::expect_near_all(bf.weight().grad().local().to_vector(),
                            bd.weight().grad().local().to_vector(), 1e-5, "weight gradient");
      test::expect_near_all(bf.bias().grad().local().to_vector(),
                            bd.bias().grad().local().to_vector(), 1e-5, "bias gradient");
      test::expect_near_all(bf.running_var().local().to_vector(),
                            bd.running_var().local().to_vector(), 1e-5, "running variance");
    }
  }
}

TEST(DistributedBatchNorm, BadPartitionsAreErrorsOnEveryRank) {
  const auto n = static_cast<std::int64_t>(world_size());
  const Partition p = Partition::world(Shape{n, 1, 1});
  nn::DistributedBatchNorm<double> bn(3, p);
  Tape tape;
  // Another grid over the same ranks.
  const TensorSpace other(Shape{4, 3}, Partition::world(Shape{n, 1}));
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(other))), Error);
  // The wrong channel count.
  EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(TensorSpace(Shape{4, 2, 3}, p)))),
               Error);
  // A replicating grid axis would count copies twice.
  if (n > 1) {
    const TensorSpace rep(p, Decomposition::balanced(Shape{4, 3, 3}, p.shape(), {-1, 1, 2}));
    EXPECT_THROW(bn.forward(tape, Var<double>(DistTensor<double>(rep))), Error);
  }
  // One value per channel over the whole partition in training.
  const Partition q = Partition::world(Shape{1, 1});
  nn::DistributedBatchNorm<double> one(3, q);
  EXPECT_THROW(one.forward(tape, Var<double>(DistTensor<double>(TensorSpace(Shape{1, 3}, q)))),
               Error);
}

}  // namespace
