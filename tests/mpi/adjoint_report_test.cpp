// dt::adjoint_test's verdict: an adjoint off by a factor 1 + e reads as e and fails the
// default tolerance for e = 1e-3 and 1e-4, in float and double, over operators that gather, sum
// and move blocks between ranks; the correct adjoints pass; the report says PASS or FAIL.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distop/kernels/axpy.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
namespace dt = distop::testing;
using distop::test::world_size;

namespace {

// An operator whose adjoint is the wrapped one's times `factor`.
template <class T>
class ScaledAdjoint final : public LinearOperator<T> {
 public:
  ScaledAdjoint(std::shared_ptr<const LinearOperator<T>> op, double factor)
      : op_(std::move(op)), factor_(factor) {}
  const TensorSpace& domain() const override { return op_->domain(); }
  const TensorSpace& range() const override { return op_->range(); }
  std::string name() const override { return op_->name() + " (scaled adjoint)"; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override { op_->forward(x, y); }
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override {
    // Through a copy: a pass-through adjoint may hand back y's own storage.
    const DistTensor<T> fy = op_->apply_adjoint(y);
    if (x.local_numel() == 0) return;
    x.local().copy_from(fy.local());
    kernels::scale(static_cast<T>(factor_), x.local());
  }

 private:
  std::shared_ptr<const LinearOperator<T>> op_;
  double factor_;
};

// Operators over every rank, on a few hundred entries (where an error normalised by
// |F x| |y| + |x| |F* y| would read about 1 / sqrt(entries) of the adjoint's).
template <class T>
std::vector<std::shared_ptr<const LinearOperator<T>>> operators() {
  const int P = world_size();
  const Shape line{P};
  const TensorSpace rows(Shape{30, 20}, Partition::world(Shape{P, 1}));
  const TensorSpace cols(Shape{30, 20}, Partition::world(Shape{1, P}));
  const TensorSpace copies(Partition::world(line), Decomposition::balanced(Shape{300}, line, {-1}));
  const TensorSpace split(Shape{300}, Partition::world(line));
  return {std::make_shared<const AllGather<T>>(split, std::vector<int>{0}),
          std::make_shared<const AllSumReduce<T>>(copies, std::vector<int>{0}),
          std::make_shared<const Repartition<T>>(rows, cols)};
}

template <class T>
void check_verdicts() {
  for (const auto& op : operators<T>()) {
    SCOPED_TRACE(op->name());
    const auto right = dt::adjoint_test(*op);
    EXPECT_TRUE(right.passed) << right.str();
    EXPECT_EQ(right.str().rfind("PASS: ", 0), 0u) << right.str();
    EXPECT_NE(right.str().find("tolerance"), std::string::npos) << right.str();
    for (const double e : {1e-3, 1e-4}) {
      const ScaledAdjoint<T> wrong(op, 1 + e);
      const auto r = dt::adjoint_test<T>(wrong);
      EXPECT_FALSE(r.passed) << "e = " << e << ": " << r.str();
      EXPECT_EQ(r.str().rfind("FAIL: ", 0), 0u) << r.str();
      // Reads e, up to the float factor's own rounding.
      EXPECT_NEAR(r.relative_error, e, 0.01 * e) << r.str();
    }
  }
}

TEST(AdjointReport, AWrongFloatAdjointFails) { check_verdicts<float>(); }
TEST(AdjointReport, AWrongDoubleAdjointFails) { check_verdicts<double>(); }

// An adjoint that vanishes where F does not reads as an error of 1.
TEST(AdjointReport, AVanishingAdjointFails) {
  const int P = world_size();
  const TensorSpace s(Shape{10}, Partition::world(Shape{P}));
  auto op = std::make_shared<const AllGather<double>>(s, std::vector<int>{0});
  const ScaledAdjoint<double> zero(op, 0.0);
  const auto r = dt::adjoint_test<double>(zero);
  EXPECT_FALSE(r.passed) << r.str();
  EXPECT_DOUBLE_EQ(r.relative_error, 1.0) << r.str();
}

}  // namespace
