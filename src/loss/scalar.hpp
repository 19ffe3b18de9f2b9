#pragma once
// Internal: the scalar a loss returns.

#include <utility>

#include "distop/dist/dist_tensor.hpp"

namespace distop::loss::detail {

// A loss value: shape [1], replicated over the partition of the tensors it measures, one component
// per rank (under the sum convention the loss is the sum of the components). `component` is this
// rank's share; ranks outside the partition hold an empty tensor.
template <class T>
DistTensor<T> scalar(const Partition& partition, double component) {
  DistTensor<T> s(
      TensorSpace(partition, Decomposition::balanced(Shape{1}, partition.shape(), {-1})));
  if (s.local_numel() > 0) s.local().fill(static_cast<T>(component));
  return s;
}

// This rank's component of the loss gradient dL/d(loss) (0 outside the partition).
template <class T>
T scalar_grad(const DistTensor<T>& g) {
  return g.local_numel() > 0 ? g.local().to_vector()[0] : T(0);
}

}  // namespace distop::loss::detail
