// distop's operation timers: off by default, and when on they count every operator applied on the
// tape (forward) and every tape entry replayed (its adjoint).
#include "distop/core/timers.hpp"

#include <gtest/gtest.h>

#include "distop/autodiff/apply.hpp"
#include "distop/ops/all_sum_reduce.hpp"

using namespace distop;

namespace {
Var<double> one_operator(Tape& tape) {
  auto p = Partition::self();
  auto op = std::make_shared<const AllSumReduce<double>>(
      TensorSpace(p, Decomposition::balanced(Shape{4}, p.shape(), {-1})), std::vector<int>{0});
  Var<double> x(DistTensor<double>(op->domain()), true);
  return apply<double>(tape, op, x);
}
}  // namespace

TEST(Timers, CountOperatorsAndAdjointsOnlyWhenEnabled) {
  timers::reset();
  timers::enable(false);
  {
    Tape tape;
    auto y = one_operator(tape);
    y.grad();
    tape.backward();
  }
  EXPECT_TRUE(timers::snapshot().empty());

  timers::enable(true);
  {
    Tape tape;
    auto y = one_operator(tape);
    y.grad();
    tape.backward();
  }
  timers::enable(false);
  const auto t = timers::snapshot();
  ASSERT_EQ(t.count("AllSumReduce"), 1u);
  ASSERT_EQ(t.count("AllSumReduce.adjoint"), 1u);
  EXPECT_EQ(t.at("AllSumReduce").calls, 1);
  EXPECT_EQ(t.at("AllSumReduce.adjoint").calls, 1);
  EXPECT_GE(t.at("AllSumReduce").seconds, 0.0);
  timers::reset();
  EXPECT_TRUE(timers::snapshot().empty());
}
