#pragma once
// AllSumReduce<T>: sums a tensor over chosen axes of its partition and leaves the sum everywhere.

#include <vector>

#include "distop/ops/linear_operator.hpp"

namespace distop {

// All-sum-reduce over grid axes `axes` of one partition.
//   domain = range: a tensor whose boxes are not split along `axes` (those grid axes replicate).
//   forward (y = A x): every rank's box is overwritten with the sum of the boxes of the ranks that
//     share its coordinates off `axes` (MPI_Allreduce over that sub-grid).
//   adjoint: A is self-adjoint, as a symmetric block matrix of identities: A* = A.
//   collective over: the partition's ranks at construction (the sub-grid communicator) and in
//     forward/adjoint over each sub-grid; ranks outside the partition return at once.
template <class T>
class AllSumReduce final : public LinearOperator<T> {
 public:
  // Collective over the partition's ranks.
  AllSumReduce(const TensorSpace& space, std::vector<int> axes);

  const TensorSpace& domain() const override { return space_; }
  const TensorSpace& range() const override { return space_; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "AllSumReduce"; }
  // The bandwidth-optimal schedule's volume (reduce-scatter then all-gather over a group of g
  // ranks): 2 (g - 1) messages each way, carrying 2 (g - 1) / g of the box each way.
  CommStats forward_stats() const override;
  CommStats adjoint_stats() const override { return forward_stats(); }
  // This rank's sub-grid communicator (MPI_COMM_NULL outside the partition), for the nonblocking
  // form in autodiff/nonblocking.hpp.
  MPI_Comm comm() const noexcept { return comm_; }

 private:
  void run(const DistTensor<T>& in, DistTensor<T>& out) const;
  TensorSpace space_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // owned by the partition's cache
  int group_size_ = 0;
};

extern template class AllSumReduce<float>;
extern template class AllSumReduce<double>;

}  // namespace distop
