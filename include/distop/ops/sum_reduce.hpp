#pragma once
// SumReduce<T>: sums copies of a tensor from one partition onto another (DistDL's sum-reduce).

#include <memory>

#include "distop/ops/broadcast_plan.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// SumReduce from a partition P_x to a partition P_y: the adjoint of Broadcast from P_y to P_x, and
// built on the same plan run in reverse. P_y's grid, left-padded with 1s, must equal P_x's grid
// or be 1 on every axis; along the axes where it is 1 the boxes are summed.
//   domain: a tensor on P_x whose boxes agree along the reduced axes (not split by them): the
//     broadcast space of `range`.
//   range:  the tensor on P_y given at construction.
//   forward (y = R x): each P_y box is overwritten with the sum of the P_x boxes that map to it.
//   adjoint (x = R* y): each P_x box is overwritten with a copy of its P_y box; R* is Broadcast.
//   collective over: the parent at construction; afterwards only the ranks of each group.
template <class T>
class SumReduce final : public LinearOperator<T> {
 public:
  // Collective over the parent. `dst` is the space of the result, on P_y.
  SumReduce(const Partition& src, const TensorSpace& dst);
  // Shares a Broadcast plan from P_y to P_x; not collective.
  SumReduce(std::shared_ptr<const BroadcastPlan> plan, const TensorSpace& dst);

  const TensorSpace& domain() const override { return domain_; }
  const TensorSpace& range() const override { return range_; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "SumReduce"; }
  // The reverse of Broadcast's: each member sends its box to the group's root once.
  CommStats forward_stats() const override;
  CommStats adjoint_stats() const override;
  const std::shared_ptr<const BroadcastPlan>& plan() const noexcept { return plan_; }

 private:
  std::shared_ptr<const BroadcastPlan> plan_;
  TensorSpace domain_;
  TensorSpace range_;
};

extern template class SumReduce<float>;
extern template class SumReduce<double>;

}  // namespace distop
