#pragma once
// Broadcast<T>: copies a tensor from one partition to another (DistDL's broadcast).

#include <memory>

#include "distop/ops/broadcast_plan.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// Broadcast from a source partition P_s to a destination partition P_d (see BroadcastPlan for the
// grid rule).
//   domain: the source space, a tensor on P_s.
//   range:  plan.broadcast_space(domain): every P_d rank holds a copy of its source rank's box.
//   forward (y = B x): each destination box is overwritten with its source box.
//   adjoint (x = B* y): each source box is overwritten with the sum of the destination boxes it
//     fed; B* is SumReduce. Proof: <B x, y> = sum_d <x_s(d), y_d> = sum_s <x_s, sum_{d: s(d)=s} y_d>.
//   collective over: the parent communicator at construction; afterwards each rank takes part
//     only in the groups it belongs to (idle ranks return at once).
template <class T>
class Broadcast final : public LinearOperator<T> {
 public:
  // Collective over the parent: builds the plan.
  Broadcast(const TensorSpace& src, const Partition& dst);
  // Shares an existing plan; not collective.
  Broadcast(std::shared_ptr<const BroadcastPlan> plan, const TensorSpace& src);

  const TensorSpace& domain() const override { return domain_; }
  const TensorSpace& range() const override { return range_; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "Broadcast"; }
  // A root sends its box to each other member of its group; each member receives it once.
  CommStats forward_stats() const override;
  CommStats adjoint_stats() const override;
  const std::shared_ptr<const BroadcastPlan>& plan() const noexcept { return plan_; }

 private:
  std::shared_ptr<const BroadcastPlan> plan_;
  TensorSpace domain_;
  TensorSpace range_;
};

extern template class Broadcast<float>;
extern template class Broadcast<double>;

}  // namespace distop
