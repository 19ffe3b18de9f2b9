#pragma once
// Reductions of local tensors, accumulated in double: the inner product, and sums over axes with
// their adjoint (the kernels behind nn/reduction.hpp and the gradients of broadcast operands).

#include <vector>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// sum_i a_i b_i (the element counts must match).
template <class T>
double dot(const Tensor<T>& a, const Tensor<T>& b);

// out = alpha (the sum of x over `axes`) + beta out, where `axes` are distinct axes of x's shape in
// increasing order and out holds, in row-major order, one entry per index of the axes kept (its
// element count is their product; any shape). With `weight` (x's element count), the sum is of x
// times weight entry by entry. Each sum is accumulated in double; out is not read when beta is 0.
// A sum over no entries (an axis of extent 0) is 0. Sums of the trailing axes (row sums) run a team
// of threads per row, so that long rows are summed in parallel; a sum of everything, one reduction
// over all threads.
template <class T>
void sum_axes(const Tensor<T>& x, const std::vector<int>& axes, T alpha, T beta, Tensor<T>& out,
              const Tensor<T>* weight = nullptr);

// x = alpha y[kept index of x] + beta x, with y laid out as sum_axes' out for x's shape and `axes`:
// y repeated along the axes summed over (the adjoint of sum_axes without a weight). x is not read
// when beta is 0.
template <class T>
void broadcast_axes(const Tensor<T>& y, const std::vector<int>& axes, T alpha, T beta,
                    Tensor<T>& x);

}  // namespace distop::kernels
