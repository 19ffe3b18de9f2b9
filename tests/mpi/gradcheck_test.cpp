// dt::gradcheck over distributed inputs: it fails a backward off by 1 % (on every rank, or on
// one rank only), agrees on every rank, passes distop's nonlinear operations (softmax,
// cross_entropy, a convolution, batch norm over split statistics) and a user's GELU written with
// make_function, checks replicated parameters copy by copy, and checks a seeded subset of a large
// input.
#include "distop/testing/gradcheck.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/batch_norm.hpp"
#include "distop/nn/conv.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/softmax.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
namespace dt = distop::testing;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

// [rows, cols] with the rows split over every rank (some ranks hold none when rows < ranks).
TensorSpace rows_space(std::int64_t rows, std::int64_t cols) {
  return TensorSpace(Shape{rows, cols}, Partition::world(Shape{world_size(), 1}));
}

Var<double> input(const TensorSpace& space, std::uint64_t seed) {
  return Var<double>(dt::random_tensor<double>(space, seed), true);
}

// y = x^3 entrywise, with a backward 3 x^2 dy times `factor` on the ranks `wrong` says (all ranks
// when it is negative, else that rank only).
Var<double> cube(Tape& tape, const Var<double>& x, double factor = 1.0, int wrong = -1) {
  const double f = wrong < 0 || wrong == world_rank() ? factor : 1.0;
  return make_function<double>(tape, "cube", {x}, [&] {
    DistTensor<double> y = x.value().clone();
    std::vector<double> v = y.local().to_vector();
    for (double& e : v) e = e * e * e;
    y.local().copy_from(Tensor<double>::from_vector(y.local().shape(), v));
    return Computed{std::move(y), [f](const DistTensor<double>& dy, Gradients<double>& grads) {
                      const std::vector<double> xv = grads.input(0).value().local().to_vector();
                      std::vector<double> g = dy.local().to_vector();
                      for (std::size_t i = 0; i < g.size(); ++i) g[i] *= 3 * xv[i] * xv[i] * f;
                      DistTensor<double> dx = DistTensor<double>::uninitialized(dy.space());
                      dx.local().copy_from(Tensor<double>::from_vector(dx.local().shape(), g));
                      grads.add(0, std::move(dx));
                    }};
  });
}

// A user's GELU (the tanh approximation), written with make_function:
//   y = x/2 (1 + tanh(u)), u = c (x + 0.044715 x^3), c = sqrt(2/pi).
Var<double> gelu(Tape& tape, const Var<double>& x) {
  return make_function<double>(tape, "gelu", {x}, [&] {
    const double c = std::sqrt(2.0 / M_PI);
    const std::vector<double> xv = x.value().local().to_vector();
    std::vector<double> yv(xv.size()), dv(xv.size());  // y and dy/dx
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double a = xv[i], u = c * (a + 0.044715 * a * a * a), t = std::tanh(u);
      yv[i] = 0.5 * a * (1 + t);
      dv[i] = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a);
    }
    DistTensor<double> y = DistTensor<double>::uninitialized(x.space());
    y.local().copy_from(Tensor<double>::from_vector(y.local().shape(), yv));
    return Computed{std::move(y), [dv](const DistTensor<double>& dy, Gradients<double>& grads) {
                      std::vector<double> g = dy.local().to_vector();
                      for (std::size_t i = 0; i < g.size(); ++i) g[i] *= dv[i];
                      DistTensor<double> dx = DistTensor<double>::uninitialized(dy.space());
                      dx.local().copy_from(Tensor<double>::from_vector(dx.local().shape(), g));
                      grads.add(0, std::move(dx));
                    }};
  });
}

// Every rank received the same report.
void expect_same_everywhere(const dt::GradcheckReport& r) {
  double v[4] = {r.max_relative_error, r.max_abs_error, static_cast<double>(r.checked),
                 r.passed ? 1.0 : 0.0};
  double lo[4], hi[4];
  MPI_Allreduce(v, lo, 4, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(v, hi, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(lo[i], hi[i]) << "report field " << i << " differs";
}

TEST(Gradcheck, FailsABackwardOffByOnePercent) {
  Var<double> x = input(rows_space(5, 3), 1);
  const auto right = dt::gradcheck([&](Tape& t) { return cube(t, x); }, {x});
  EXPECT_TRUE(right.passed) << right.str();
  EXPECT_EQ(right.checked, 15);
  EXPECT_EQ(right.str().rfind("PASS", 0), 0u) << right.str();
  const auto wrong = dt::gradcheck([&](Tape& t) { return cube(t, x, 1.01); }, {x});
  EXPECT_FALSE(wrong.passed) << wrong.str();
  EXPECT_EQ(wrong.str().rfind("FAIL", 0), 0u) << wrong.str();
  // About 1 % of the largest gradient entry 3 x^2 r (|x| < 1, |r| < 1): far above the tolerance.
  EXPECT_GT(wrong.max_abs_error, 1e-4);
  EXPECT_LT(wrong.max_relative_error, 0.0101);
  expect_same_everywhere(wrong);
  // The worst entry is a real one: the tape's and the finite difference's derivatives differ by
  // 1 %.
  EXPECT_NEAR(wrong.worst_tape, 1.01 * wrong.worst_numeric, 1e-6);
}

TEST(Gradcheck, FindsTheOneRankWhoseBackwardIsWrong) {
  const int bad = world_size() - 1;
  Var<double> x = input(rows_space(2 * world_size(), 2), 2);
  const auto r = dt::gradcheck([&](Tape& t) { return cube(t, x, 1.01, bad); }, {x});
  EXPECT_FALSE(r.passed) << r.str();
  EXPECT_EQ(r.worst_rank, bad) << r.str();
  EXPECT_EQ(r.worst_input, 0u);
  expect_same_everywhere(r);
}

// A collective operation: y = the sum over the ranks of x (AllSumReduce, its own adjoint), cubed.
// A wrong scale in the operator's place is caught the same way.
TEST(Gradcheck, FailsAWrongCollectiveBackward) {
  const int P = world_size();
  const Partition p = Partition::world(Shape{P});
  const TensorSpace xs(p, Decomposition::balanced(Shape{4}, Shape{P}, {-1}));
  std::shared_ptr<const LinearOperator<double>> sum =
      std::make_shared<const AllSumReduce<double>>(xs, std::vector<int>{0});
  Var<double> x = input(xs, 3);
  auto f = [&](double factor) {
    return [&, factor](Tape& t) {
      Var<double> s = apply<double>(t, sum, x);
      return cube(t, s, factor);
    };
  };
  const auto right = dt::gradcheck(f(1.0), {x});
  EXPECT_TRUE(right.passed) << right.str();
  EXPECT_EQ(right.checked, 4 * P);
  const auto wrong = dt::gradcheck(f(0.99), {x});
  EXPECT_FALSE(wrong.passed) << wrong.str();
  expect_same_everywhere(wrong);
}

TEST(Gradcheck, PassesSoftmaxCrossEntropyAndAUsersGelu) {
  const TensorSpace s = rows_space(6, 4);
  Var<double> x = input(s, 4);
  const auto soft = dt::gradcheck([&](Tape& t) { return nn::softmax(t, x); }, {x});
  EXPECT_TRUE(soft.passed) << soft.str();
  const auto g = dt::gradcheck([&](Tape& t) { return gelu(t, x); }, {x});
  EXPECT_TRUE(g.passed) << g.str();
  std::vector<std::int32_t> labels;
  const std::int64_t first = s.local_offset()[0];
  for (std::int64_t i = 0; i < s.local_shape()[0]; ++i)
    labels.push_back(static_cast<std::int32_t>((first + i) * 3 % 4));
  const auto ce = dt::gradcheck([&](Tape& t) { return loss::cross_entropy(t, x, labels); }, {x});
  EXPECT_TRUE(ce.passed) << ce.str();
  EXPECT_EQ(ce.checked, 24);
  expect_same_everywhere(ce);
}

// The weight and bias are replicated, one copy per rank: under the sum convention each copy is a
// variable of its own, whose gradient comes from its rank's rows alone.
TEST(Gradcheck, PassesAConvolutionAndALinearLayerWithReplicatedParameters) {
  const int P = world_size();
  const Partition p4 = Partition::world(Shape{P, 1, 1, 1});
  nn::Conv<double> conv(2, 2, 3, {3}, p4, {.padding = {1}});
  Var<double> x = input(TensorSpace(Shape{5, 2, 4, 5}, p4), 5);
  const auto c =
      dt::gradcheck([&](Tape& t) { return conv.forward(t, x); }, {x, conv.weight(), conv.bias()});
  EXPECT_TRUE(c.passed) << c.str();
  EXPECT_EQ(c.checked, 5 * 2 * 4 * 5 + P * (3 * 2 * 3 * 3 + 3));

  const Partition p2 = Partition::world(Shape{P, 1});
  nn::Linear<double> lin(3, 2, p2);
  Var<double> z = input(rows_space(5, 3), 6);
  const auto l = dt::gradcheck([&](Tape& t) { return gelu(t, lin.forward(t, z)); },
                               {z, lin.weight(), lin.bias()});
  EXPECT_TRUE(l.passed) << l.str();
}

// Batch norm's statistics are all-reduced over the ranks: every input entry moves every output.
// (The weight and bias are tied, one parameter over the partition, not a variable per copy: their
// gradients are checked at one rank.)
TEST(Gradcheck, PassesBatchNormOverSplitStatistics) {
  const Partition p = Partition::world(Shape{world_size(), 1, 1});
  nn::DistributedBatchNorm<double> bn(2, p);
  Var<double> x = input(TensorSpace(Shape{4, 2, 3}, p), 7);
  std::vector<Var<double>> wrt{x};
  if (world_size() == 1) {
    wrt.push_back(bn.weight());
    wrt.push_back(bn.bias());
  }
  const auto r = dt::gradcheck([&](Tape& t) { return bn.forward(t, x); }, wrt);
  EXPECT_TRUE(r.passed) << r.str();
  expect_same_everywhere(r);
}

TEST(Gradcheck, ChecksASeededSubsetOfALargeInput) {
  const TensorSpace s = rows_space(40, 25);
  Var<double> x = input(s, 8);
  dt::GradcheckOptions o;
  o.max_entries = 7;
  const auto r = dt::gradcheck([&](Tape& t) { return cube(t, x); }, {x}, o);
  EXPECT_TRUE(r.passed) << r.str();
  std::int64_t expected = 0;
  for (int q = 0; q < world_size(); ++q)
    expected += std::min<std::int64_t>(7, s.local_shape_of_rank(q).numel());
  EXPECT_EQ(r.checked, expected);
  // A wrong backward on a subset is still caught: every entry's gradient is 1 % off.
  const auto wrong = dt::gradcheck([&](Tape& t) { return cube(t, x, 1.01); }, {x}, o);
  EXPECT_FALSE(wrong.passed) << wrong.str();
}

// An input on the last rank alone: the others hold nothing, run f all the same, and agree.
TEST(Gradcheck, InputsOnSomeRanksOnly) {
  const Partition last = Partition::world(Shape{1, 1}, {world_size() - 1});
  Var<double> x = input(TensorSpace(Shape{3, 2}, last), 11);
  const auto right = dt::gradcheck([&](Tape& t) { return cube(t, x); }, {x});
  EXPECT_TRUE(right.passed) << right.str();
  EXPECT_EQ(right.checked, 6);
  const auto wrong = dt::gradcheck([&](Tape& t) { return cube(t, x, 1.01); }, {x});
  EXPECT_FALSE(wrong.passed) << wrong.str();
  EXPECT_EQ(wrong.worst_rank, world_size() - 1);
  expect_same_everywhere(wrong);
}

TEST(Gradcheck, BadArgumentsAreErrors) {
  Var<double> x = input(rows_space(4, 2), 9);
  Var<double> constant(dt::random_tensor<double>(rows_space(4, 2), 10), false);
  EXPECT_THROW(dt::gradcheck([&](Tape& t) { return cube(t, x); }, {}), Error);
  EXPECT_THROW(dt::gradcheck([&](Tape& t) { return cube(t, x); }, {constant}), Error);
  dt::GradcheckOptions o;
  o.step = 0;
  EXPECT_THROW(dt::gradcheck([&](Tape& t) { return cube(t, x); }, {x}, o), Error);
}

}  // namespace
