#pragma once
// Repartition<T>: moves a tensor from any partition and decomposition to any other.

#include <memory>
#include <vector>

#include "distop/core/box.hpp"
#include "distop/kernels/box.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// The plan of a repartition: for every pair of ranks, the intersection of the source rank's box
// with the destination rank's box. Entries held by several source ranks (a replicating grid axis)
// are read from one of them only: where both spaces share one partition, the replica with the
// destination rank's own coordinate on every replicating axis (each replica group serves its own
// ranks, so an all-gather gathers within each group, and a replicated tensor split along the
// replicating axis is sliced locally); between two partitions, the canonical copy, the rank with
// coordinate 0 on every replicating axis. A rank's overlap with itself is a local copy. Built
// from metadata, then agreed: the constructor is collective over the parent (over the
// partition's ranks alone when both spaces share one partition; one allreduce), so that spaces
// that differ between ranks (an explicit decomposition, say), a message over MPI's int count
// limit, or any other error raise the same Error on every rank. Identical source and destination
// spaces make a pass-through.
class RepartitionPlan {
 public:
  RepartitionPlan(TensorSpace src, TensorSpace dst);

  const TensorSpace& src() const noexcept { return src_; }
  const TensorSpace& dst() const noexcept { return dst_; }
  bool pass_through() const noexcept { return pass_through_; }

  // y = every destination box filled from the source boxes it reads (overwrites y).
  template <class T>
  void copy_forward(const Tensor<T>& x, Tensor<T>& y) const;
  // x = the reverse transfer, summed: every source entry receives the sum of the destination
  // entries that copied it; entries no destination read are zero (overwrites x).
  template <class T>
  void accumulate_reverse(const Tensor<T>& y, Tensor<T>& x) const;

  // Messages and bytes on this rank: exactly the entries whose owner changes.
  CommStats forward_stats(std::size_t element) const;
  CommStats reverse_stats(std::size_t element) const;

 private:
  struct Transfer {
    int peer;  // parent rank
    Box box;   // in this rank's local coordinates
    kernels::BoxPlan plan;  // the box in this rank's local tensor, for pack and unpack
  };
  struct LocalCopy {
    Box src;  // in the source tensor's local coordinates
    Box dst;  // in the destination tensor's local coordinates
    kernels::BoxPlan src_plan;
    kernels::BoxPlan dst_plan;
  };
  void build();
  TensorSpace src_;
  TensorSpace dst_;
  bool pass_through_ = false;
  std::vector<Transfer> sends_;  // forward: parts of this rank's source box, to destination ranks
  std::vector<Transfer> recvs_;  // forward: parts of this rank's destination box, from sources
  std::vector<LocalCopy> local_;
  // Whether the local copies' source boxes alone tile this rank's source block, and whether they
  // do together with the sends' boxes (accumulate_reverse then overwrites instead of adding).
  bool reverse_local_tiles_ = false;
  bool reverse_all_tile_ = false;
};

// Repartition from space A to space B over the same global shape (any grids, rank sets,
// balanced or explicit decompositions; overlapping, disjoint or idle ranks).
//   forward (y = R x): every entry of every destination box is the entry of the same global
//     index in the one source box it reads (see RepartitionPlan for which replica that is).
//   adjoint (x = R* y): R is a 0/1 matrix with one 1 per row, so R* sends every destination
//     entry back to the source entry it read and sums there; entries no destination read (the
//     non-canonical replicas, between two partitions) get zero.
//   collective over: the parent at construction (see RepartitionPlan); then the ranks of either
//     partition (point-to-point messages only; idle ranks return at once). Identical spaces: a
//     pass-through that shares x's storage, no copy.
template <class T>
class Repartition : public LinearOperator<T> {
 public:
  Repartition(const TensorSpace& src, const TensorSpace& dst);
  explicit Repartition(std::shared_ptr<const RepartitionPlan> plan) : plan_(std::move(plan)) {}

  const TensorSpace& domain() const override { return plan_->src(); }
  const TensorSpace& range() const override { return plan_->dst(); }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "Repartition"; }
  CommStats forward_stats() const override { return plan_->forward_stats(sizeof(T)); }
  CommStats adjoint_stats() const override { return plan_->reverse_stats(sizeof(T)); }
  const std::shared_ptr<const RepartitionPlan>& plan() const noexcept { return plan_; }

 private:
  std::shared_ptr<const RepartitionPlan> plan_;
};

// Runs a repartition plan backwards: forward is the plan's summed reverse transfer, adjoint its
// copy. ReduceScatter is this for AllGather's plan.
template <class T>
class ReversedRepartition : public LinearOperator<T> {
 public:
  explicit ReversedRepartition(std::shared_ptr<const RepartitionPlan> plan)
      : plan_(std::move(plan)) {}
  const TensorSpace& domain() const override { return plan_->dst(); }
  const TensorSpace& range() const override { return plan_->src(); }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "ReversedRepartition"; }
  CommStats forward_stats() const override { return plan_->reverse_stats(sizeof(T)); }
  CommStats adjoint_stats() const override { return plan_->forward_stats(sizeof(T)); }
  const std::shared_ptr<const RepartitionPlan>& plan() const noexcept { return plan_; }

 private:
  std::shared_ptr<const RepartitionPlan> plan_;
};

extern template class Repartition<float>;
extern template class Repartition<double>;
extern template class ReversedRepartition<float>;
extern template class ReversedRepartition<double>;

}  // namespace distop
