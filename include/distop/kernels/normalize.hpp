#pragma once
// Row-wise L2 normalisation of 2-D local tensors [rows, n] (torch.nn.functional.normalize with
// p = 2 over the last axis), the kernels behind nn/normalize.hpp. Each row is worked on by a team
// of threads (one thread on the host), its sums kept in double.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// y = x / max(||x||, eps) row by row, and norms[r] = ||x[r, :]|| (shape [rows]), for the backward
// pass. y has x's shape and may alias it.
template <class T>
void normalize_rows(const Tensor<T>& x, double eps, Tensor<T>& y, Tensor<double>& norms);

// dx = beta dx + the input gradient of normalize_rows, given its output y and norms: where
// ||x|| >= eps, (dy - y (y . dy)) / ||x||; elsewhere (the denominator held at eps) dy / eps. dx is
// not read when beta is 0 and may alias dy.
template <class T>
void normalize_rows_backward(const Tensor<T>& y, const Tensor<T>& dy, const Tensor<double>& norms,
                             double eps, T beta, Tensor<T>& dx);

}  // namespace distop::kernels
