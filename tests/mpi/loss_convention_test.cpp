// distop's loss convention (docs/losses.md) across ranks: a loss is a [1] Var replicated over its
// partition whose components sum to it; loss::total gives that sum on every rank (the one-rank
// loss of the whole tensor), ranks outside the partition hold nothing, and backward seeded 1 gives
// the loss's gradient. cross_entropy, mse and a user's loss composed from nn operations (the
// docs' binary cross-entropy) all follow it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/loss/mse.hpp"
#include "distop/loss/total.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/pointwise.hpp"
#include "distop/nn/reduction.hpp"
#include "distop/testing/gradcheck.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
namespace dt = distop::testing;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

// [bce]
// -(z log sigmoid(x) + (1 - z) log sigmoid(-x)), averaged over every entry of x (targets z in
// [0, 1], in x's space).
template <class T>
Var<T> bce_with_logits(Tape& tape, const Var<T>& x, const Var<T>& z) {
  Var<T> pos = nn::mul(tape, z, nn::logsigmoid(tape, x));
  Var<T> neg = nn::mul(tape, nn::add(tape, nn::scale(tape, z, -1.0), 1.0),
                       nn::logsigmoid(tape, nn::scale(tape, x, -1.0)));
  return nn::scale(tape, nn::mean(tape, nn::add(tape, pos, neg)), -1.0);
}
// [bce]

constexpr std::int64_t kRows = 7, kCols = 3;

// [rows, cols] split by rows over every rank, and the same tensor whole on this rank alone.
TensorSpace split_space() {
  return TensorSpace(Shape{kRows, kCols}, Partition::world(Shape{world_size(), 1}));
}
TensorSpace whole_space() { return TensorSpace(Shape{kRows, kCols}, Partition::self({1, 1})); }

// The loss of a [1] Var on its partition: shape, replication and this rank's component.
template <class T>
void expect_a_loss(const Var<T>& l, const Partition& p) {
  EXPECT_EQ(l.space().global_shape(), Shape{1});
  EXPECT_TRUE(l.space().partition().same_as(p));
  EXPECT_EQ(l.value().local_numel(), p.active() ? 1 : 0);
}

TEST(LossConvention, ComponentsSumToTheOneRankLoss) {
  const TensorSpace s = split_space(), w = whole_space();
  Var<double> x(test::random_tensor<double>(s, 1, -2.0, 2.0), true);
  Var<double> xw(test::random_tensor<double>(w, 1, -2.0, 2.0), true);
  const auto z = test::random_tensor<double>(s, 2, 0.0, 1.0);
  const auto zw = test::random_tensor<double>(w, 2, 0.0, 1.0);
  std::vector<std::int32_t> labels, labels_w;
  for (std::int64_t i = 0; i < kRows; ++i) labels_w.push_back(static_cast<std::int32_t>(i % kCols));
  for (std::int64_t i = 0; i < s.local_shape()[0]; ++i)
    labels.push_back(labels_w[static_cast<std::size_t>(s.local_offset()[0] + i)]);

  Tape tape;
  const Var<double> ce = loss::cross_entropy(tape, x, labels);
  const Var<double> ms = loss::mse(tape, x, z);
  const Var<double> bce = bce_with_logits(tape, x, Var<double>(z));
  tape.clear();
  Tape one;
  const double ce_w = loss::total(loss::cross_entropy(one, xw, labels_w));
  const double ms_w = loss::total(loss::mse(one, xw, zw));
  const double bce_w = loss::total(bce_with_logits(one, xw, Var<double>(zw)));
  for (const auto& [l, want] : {std::pair{ce, ce_w}, {ms, ms_w}, {bce, bce_w}}) {
    expect_a_loss(l, s.partition());
    EXPECT_NEAR(loss::total(l), want, 1e-14 * std::abs(want));
    // This rank's component is its rows' part alone: with several ranks, not the whole loss.
    if (world_size() > 1) {
      EXPECT_GT(std::abs(l.value().local().to_vector()[0] - want), 1e-6 * std::abs(want));
    }
  }
}

// backward(tape, loss) seeds every component with 1: the gradient of the sum, checked by
// central differences of the components' sum over the ranks.
TEST(LossConvention, BackwardGivesTheGradientOfTheSum) {
  const TensorSpace s = split_space();
  Var<double> x(test::random_tensor<double>(s, 3, -2.0, 2.0), true);
  const auto z = test::random_tensor<double>(s, 4, 0.0, 1.0);
  const auto r = dt::gradcheck([&](Tape& t) { return bce_with_logits(t, x, Var<double>(z)); }, {x});
  EXPECT_TRUE(r.passed) << r.str();
  // And against backward(tape, loss) itself: gradcheck seeds random weights; seed 1 is the same
  // derivative.
  Tape tape;
  Var<double> l = bce_with_logits(tape, x, Var<double>(z));
  backward(tape, l);
  const auto g = x.grad().local().to_vector();
  const auto xv = x.value().local().to_vector(), zv = z.local().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double sig = 1 / (1 + std::exp(-xv[i]));
    EXPECT_NEAR(g[i], (sig - zv[i]) / (kRows * kCols), 1e-15) << i;
  }
  x.zero_grad();
}

// A loss on some ranks only: the others hold an empty tensor, and total is the loss everywhere.
TEST(LossConvention, RanksOutsideThePartitionHoldNothing) {
  DISTOP_REQUIRE_RANKS(2);
  const Partition p = Partition::world(Shape{1, 1}, {world_size() - 1});
  const TensorSpace s(Shape{kRows, kCols}, p);
  Var<double> x(test::random_tensor<double>(s, 5), true);
  const auto z = test::random_tensor<double>(s, 6);
  Tape tape;
  Var<double> l = loss::mse(tape, x, z);
  expect_a_loss(l, p);
  double mine = l.value().local_numel() > 0 ? l.value().local().to_vector()[0] : 0.0;
  MPI_Bcast(&mine, 1, MPI_DOUBLE, world_size() - 1, MPI_COMM_WORLD);
  EXPECT_EQ(loss::total(l), mine);
  backward(tape, l);
  EXPECT_EQ(x.grad().local_numel(), world_rank() == world_size() - 1 ? kRows * kCols : 0);
}

TEST(LossConvention, TotalOfATensorThatIsNotALossIsAnError) {
  Var<double> x(test::random_tensor<double>(split_space(), 7), false);
  EXPECT_THROW(loss::total(x), Error);
}

}  // namespace
