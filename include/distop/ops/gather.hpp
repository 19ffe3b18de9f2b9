#pragma once
// Gather<T> and Scatter<T>: a distributed tensor to and from its whole on one root rank.

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

// Scatter from one rank: the whole tensor on `root` to the boxes of `dst` (every replica of a
// box receives it). Its adjoint sums all the copies of each entry back onto the root: Gather's
// data movement with a sum where copies meet.
template <class T>
class Scatter final : public Repartition<T> {
 public:
  explicit Scatter(const TensorSpace& dst, int root = 0);
  std::string name() const override { return "Scatter"; }
};

extern template class Gather<float>;
extern template class Gather<double>;
extern template class Scatter<float>;
extern template class Scatter<double>;

}  // namespace distop
