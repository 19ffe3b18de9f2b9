#pragma once
// ReduceScatter<T>: the adjoint of AllGather<T>, the same plan run in reverse.

#include <vector>

#include "distop/ops/all_gather.hpp"

namespace distop {

// Reduce-scatter along grid axes `axes`: the adjoint of AllGather(split, axes).
//   domain: gathered_space(split, axes) (every rank of a group holds a whole copy).
//   range: `split`.
//   forward: each block's owner receives the sum over the group of that block
//     (MPI_Reduce_scatter's data movement).  adjoint: AllGather.
template <class T>
class ReduceScatter final : public ReversedRepartition<T> {
 public:
  ReduceScatter(const TensorSpace& split, const std::vector<int>& axes);
  std::string name() const override { return "ReduceScatter"; }
};

extern template class ReduceScatter<float>;
extern template class ReduceScatter<double>;

}  // namespace distop
