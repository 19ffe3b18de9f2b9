#pragma once
// Internal to the nn layer: helpers its layers share.

#include <utility>
#include <vector>

#include "distop/autodiff/var.hpp"

namespace distop::nn::detail {

// The space of a parameter of global shape `shape` replicated over every rank of the partition.
inline TensorSpace replicated(const Partition& p, const Shape& shape) {
  return TensorSpace(
      p, Decomposition::balanced(shape, p.shape(),
                                 std::vector<int>(static_cast<std::size_t>(shape.rank()), -1)));
}

// v.grad += (what `write` computes): written straight into the existing gradient (beta = 1), or
// into a fresh tensor (beta = 0) that becomes the gradient. `write(beta, g)` must overwrite g with
// beta g + the contribution.
template <class T, class Write>
void accumulate(const Var<T>& v, Write write) {
  if (v.has_grad()) {
    write(T(1), v.grad().local());
  } else {
    DistTensor<T>& g = v.new_grad_for_overwrite();
    try {
      write(T(0), g.local());
    } catch (...) {
      v.zero_grad();  // no half-written gradient
      throw;
    }
  }
}

}  // namespace distop::nn::detail
