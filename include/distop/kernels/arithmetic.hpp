#pragma once
// Elementwise arithmetic of local tensors, the second operand optionally repeated along rows: the
// kernels behind nn/arithmetic.hpp.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// A row operand b of n entries applies to every row of a seen as [a.numel() / n, n]: b has a's
// element count (entry by entry), or n divides a's count (n = 1: one scalar for every entry). Any
// other count is an Error. The output has a's element count and may alias a (not b, unless b has
// a's count).

// c = a + alpha b.
template <class T>
void add(const Tensor<T>& a, T alpha, const Tensor<T>& b, Tensor<T>& c);
// c = alpha a b + beta c; c is not read when beta is 0 (it may be uninitialised).
template <class T>
void mul(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c);
// y = alpha x + beta y for tensors of one element count; y is not read when beta is 0 (unlike
// axpby, which reads it: this one may write fresh, uninitialised storage).
template <class T>
void scaled_add(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y);

}  // namespace distop::kernels
