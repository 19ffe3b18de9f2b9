#pragma once
// Level-1 updates of local tensors.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// y += alpha x (the element counts must match).
template <class T>
void axpy(T alpha, const Tensor<T>& x, Tensor<T>& y);
// y = alpha x + beta y
template <class T>
void axpby(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y);
// x *= alpha
template <class T>
void scale(T alpha, Tensor<T>& x);

}  // namespace distop::kernels
