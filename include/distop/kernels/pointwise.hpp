#pragma once
// Elementwise math of local tensors and the derivatives of each, the kernels behind
// nn/pointwise.hpp.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// Forward: y = f(x), overwriting y (same element count; y may alias x). Backward: dx = beta dx +
// dy f'(.), from the saved input x or output y as each names; dx is not read when beta is 0, and
// may alias dy.

// y = exp(x); backward from y: dx = beta dx + dy y.
template <class T>
void exp(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void exp_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// y = log(x); backward from x: dx = beta dx + dy / x.
template <class T>
void log(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void log_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// y = sqrt(x); backward from y: dx = beta dx + dy / (2 y).
template <class T>
void sqrt(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void sqrt_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// y = min(max(x, lo), hi) as torch.clamp: hi where lo > hi, a NaN stays NaN (infinite bounds for a
// missing one). Backward from x: dx = beta dx + (dy where lo <= x <= hi, else 0).
template <class T>
void clamp(const Tensor<T>& x, T lo, T hi, Tensor<T>& y);
template <class T>
void clamp_backward(const Tensor<T>& x, T lo, T hi, const Tensor<T>& dy, T beta, Tensor<T>& dx);

// y = log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), which overflows nowhere. Backward from x:
// dx = beta dx + dy sigmoid(-x).
template <class T>
void logsigmoid(const Tensor<T>& x, Tensor<T>& y);
template <class T>
void logsigmoid_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx);

}  // namespace distop::kernels
