#pragma once
// Local pooling kernels over 1-3 spatial axes.

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "distop/core/tensor.hpp"
#include "distop/kernels/window.hpp"

namespace distop::kernels {

// For each output, the flat index into x of the entry the max pooling took (its gradient goes
// there); one per output entry.
using ArgmaxView = Kokkos::View<std::int64_t*, MemSpace>;

// x [N, C, in_1 .. in_d] -> y [N, C, out_1 .. out_d] over the windows of g (window.hpp).
// Max pooling ignores padding (PyTorch pads with -infinity); ties go to the first tap in
// row-major window order. A window that reads padding only is an Error at validation (it cannot
// arise from a valid layer). Overwrites y and argmax (resized to y's numel).
template <class T>
void max_pool_forward(const Tensor<T>& x, Tensor<T>& y, ArgmaxView& argmax,
                      const WindowGeometry& g);
// dx = beta dx + (dy scattered to the argmax entries, summed where windows overlap).
template <class T>
void max_pool_backward(const Tensor<T>& dy, const ArgmaxView& argmax, T beta, Tensor<T>& dx);

// Average pooling dividing by the full window size, padding counted as zeros (PyTorch's
// count_include_pad = True, the default).
template <class T>
void avg_pool_forward(const Tensor<T>& x, Tensor<T>& y, const WindowGeometry& g);
// dx = beta dx + the adjoint of avg_pool_forward applied to dy.
template <class T>
void avg_pool_backward(const Tensor<T>& dy, T beta, Tensor<T>& dx, const WindowGeometry& g);

}  // namespace distop::kernels
