#pragma once
// Reductions over local tensors, accumulated in double.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// sum_i a_i b_i (the element counts must match).
template <class T>
double dot(const Tensor<T>& a, const Tensor<T>& b);
// sum_i a_i
template <class T>
double sum(const Tensor<T>& a);
// max_i |a_i| (0 for an empty tensor)
template <class T>
double max_abs(const Tensor<T>& a);

}  // namespace distop::kernels
