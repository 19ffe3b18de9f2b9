#pragma once
// Gather<T>: a distributed tensor assembled whole on one root rank (its adjoint is Scatter<T>,
// ops/scatter.hpp).

#include "distop/ops/repartition.hpp"

namespace distop {

// The space of the whole tensor `global` held by parent rank `root` alone (a one-cell grid with
// as many axes as the tensor). Collective over `parent`.
TensorSpace root_space(MPI_Comm parent, const Shape& global, int root);

// Gather onto one rank: a Repartition whose destination is the whole tensor on `root`.
//   domain: any space (balanced or explicit blocks; replicated copies are read once, from the
//     canonical copy).  range: root_space(...).
//   forward: the root's tensor is assembled from the boxes (MPI_Gatherv's data movement).
//   adjoint: Scatter: every box receives its part of the root's tensor (replicas but the
//     canonical one receive zeros: the adjoint of reading one copy).
//   collective over: the parent at construction (the root's partition); then the ranks
//     holding boxes and the root.
template <class T>
class Gather final : public Repartition<T> {
 public:
  explicit Gather(const TensorSpace& src, int root = 0);
  std::string name() const override { return "Gather"; }
};

extern template class Gather<float>;
extern template class Gather<double>;

}  // namespace distop
