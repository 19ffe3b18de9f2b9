#pragma once
// The transpose of a 2-D local tensor, the kernel behind nn/transpose.hpp.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// y = x^T + beta y for x of shape [m, n] and y of shape [n, m]; y is not read when beta is 0 and
// must not alias x.
template <class T>
void transpose(const Tensor<T>& x, T beta, Tensor<T>& y);

}  // namespace distop::kernels
