#pragma once
// General matrix multiply of local 2-D tensors through BLAS: cblas on the host, cuBLAS where the
// tensors live in device memory (CUDA builds). Never a hand-written loop.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// Whether an operand is used as stored (N) or transposed (T).
enum class Op { N, T };

// c = alpha op(a) op(b) + beta c, for row-major 2-D tensors with op(a) of shape [m, k], op(b) of
// shape [k, n] and c of shape [m, n]. Shapes are checked (an Error names them all). When beta is 0,
// c is not read, so it may be uninitialised. c must not alias a or b.
template <class T>
void gemm(Op op_a, Op op_b, T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c);

}  // namespace distop::kernels
