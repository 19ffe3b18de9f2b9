#pragma once
// Batch normalisation kernels over the channel axis of a local tensor [N, C, s...].

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// x is a local tensor [N, C, s_1..s_k] (k >= 0; [N, C] is k = 0), seen as [N, C, S] with
// S = s_1..s_k. Per-channel statistics are Tensor<double> of shape [C] (mean, invstd) or [2, C]
// (backward sums). Every sum runs over n and s in row-major order, in double, so the result does
// not depend on the backend's thread count. weight and bias are [C], or empty (numel 0) for an
// affine-free normalisation (weight 1, bias 0). A shape mismatch is an Error.

// sums[c] = the sum over n, s of x[n, c, s]. Overwrites sums.
template <class T>
void channel_sums(const Tensor<T>& x, Tensor<double>& sums);
// sums[c] = the sum over n, s of (x[n, c, s] - mean[c])^2. Overwrites sums.
template <class T>
void channel_squared_deviations(const Tensor<T>& x, const Tensor<double>& mean,
                                Tensor<double>& sums);

// y = weight[c] (x - mean[c]) invstd[c] + bias[c]. Overwrites y (same shape as x).
template <class T>
void batch_norm_forward(const Tensor<T>& x, const Tensor<double>& mean,
                        const Tensor<double>& invstd, const Tensor<T>& weight,
                        const Tensor<T>& bias, Tensor<T>& y);

// sums[0, c] = the sum over n, s of dy[n, c, s] and sums[1, c] = the sum of dy xhat with
// xhat = (x - mean[c]) invstd[c]: the gradients of the bias and weight, and the two reductions the
// input gradient of a training-mode normalisation needs. Overwrites sums ([2, C]).
template <class T>
void batch_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& mean,
                              const Tensor<double>& invstd, Tensor<double>& sums);

// dx = beta dx + the input gradient. With batch statistics (sums the [2, C] sums of
// batch_norm_backward_sums over all `count` entries per channel the statistics were taken over):
//   weight[c] invstd[c] (dy - sums[0, c] / count - xhat sums[1, c] / count);
// with fixed statistics (sums empty, count ignored): weight[c] invstd[c] dy.
template <class T>
void batch_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& mean,
                               const Tensor<double>& invstd, const Tensor<T>& weight,
                               const Tensor<double>& sums, double count, T beta, Tensor<T>& dx);

}  // namespace distop::kernels
