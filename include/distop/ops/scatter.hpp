#pragma once
// Scatter<T>: the whole tensor on one root rank to the boxes of a distributed tensor (its adjoint
// is Gather<T>'s data movement, summing replicas).

#include "distop/ops/gather.hpp"

namespace distop {

// Scatter from one rank: the whole tensor on `root` to the boxes of `dst` (every replica of a
// box receives it). Its adjoint sums all the copies of each entry back onto the root: Gather's
// data movement with a sum where copies meet.
template <class T>
class Scatter final : public Repartition<T> {
 public:
  explicit Scatter(const TensorSpace& dst, int root = 0);
  std::string name() const override { return "Scatter"; }
};

extern template class Scatter<float>;
extern template class Scatter<double>;

}  // namespace distop
