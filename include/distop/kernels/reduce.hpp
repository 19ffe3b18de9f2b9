#pragma once
// The inner product of local tensors, accumulated in double.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// sum_i a_i b_i (the element counts must match).
template <class T>
double dot(const Tensor<T>& a, const Tensor<T>& b);

}  // namespace distop::kernels
