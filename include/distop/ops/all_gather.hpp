#pragma once
// AllGather<T>: every rank of a group receives every member's block. Its adjoint,
// ReduceScatter<T> (ops/reduce_scatter.hpp), runs the same plan in reverse.

#include <vector>

#include "distop/ops/repartition.hpp"

namespace distop {

// The space `split` with the tensor axes that grid axes `axes` split made whole: every rank along
// those grid axes holds the whole extent (a copy).
TensorSpace gathered_space(const TensorSpace& split, const std::vector<int>& axes);

// All-gather along grid axes `axes`.
//   domain: `split`, a tensor split (among others) by the grid axes `axes`.
//   range: gathered_space(split, axes): the same partition, those tensor axes whole.
//   forward: every rank of a group along `axes` receives every member's block
//     (MPI_Allgatherv's data movement).
//   adjoint: ReduceScatter: each block's owner receives the sum of all the copies of its block.
//   collective over: the partition's ranks (point-to-point within each group).
template <class T>
class AllGather final : public Repartition<T> {
 public:
  AllGather(const TensorSpace& split, const std::vector<int>& axes);
  std::string name() const override { return "AllGather"; }
};

extern template class AllGather<float>;
extern template class AllGather<double>;

}  // namespace distop
