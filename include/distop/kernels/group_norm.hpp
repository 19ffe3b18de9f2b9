#pragma once
// Group normalisation kernels over a local tensor x [n, C, s] (a layer's box [N, C, s_1..s_d] with
// the spatial extents flattened into s), the kernels behind nn/group_norm.hpp. The C channels fall
// into G groups of C / G consecutive channels; a (sample, group) pair is a "row" r = i G + g of
// C / G * s entries, contiguous in memory, so the row statistics come from the layer-norm kernels
// on x reshaped to [n G, C / G s] (layer_norm_moments, layer_norm_stats). A row may be one rank's
// part of a (sample, group) whose spatial domain is split over several ranks: the statistics are
// then combined from every part's moments, and the backward's row sums summed over the parts.
// Row statistics are Tensor<double> [n G, 2]: (mean, invstd). weight and bias are [C] (one per
// channel), or empty (numel 0) for weight 1 and bias 0. Sums are kept in double. A shape mismatch
// is an Error.

#include <cstdint>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// y = (x - mean) invstd weight[c] + bias[c]. Overwrites y (x's shape; may alias x).
template <class T>
void group_norm_forward(const Tensor<T>& x, std::int64_t groups, const Tensor<double>& stats,
                        const Tensor<T>& weight, const Tensor<T>& bias, Tensor<T>& y);

// sums[r, 0] = the sum over the row of g = dy weight[c], sums[r, 1] = the sum of g xhat with
// xhat = (x - mean) invstd: the two reductions of the input gradient, over this part of each row.
// Overwrites sums ([n G, 2]).
template <class T>
void group_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                              const Tensor<double>& stats, const Tensor<T>& weight,
                              Tensor<double>& sums);

// dx = beta dx + invstd (g - sums[r, 0] / count - xhat sums[r, 1] / count), g = dy weight[c],
// given the sums over the whole row (of `count` entries, every part's). dx may alias dy.
template <class T>
void group_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                               const Tensor<double>& stats, const Tensor<T>& weight,
                               const Tensor<double>& sums, double count, T beta, Tensor<T>& dx);

// dweight[c] = beta dweight[c] + the sum over i, s of dy xhat (the weight's gradient over this
// box), and dbias[c] = beta dbias[c] + the sum of dy (the bias's); each sums in (i, s) order.
// dweight and dbias are [C]; with n s = 0 they are beta times themselves.
template <class T>
void group_norm_weight_grad(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                            const Tensor<double>& stats, T beta, Tensor<T>& dweight);
template <class T>
void group_norm_bias_grad(const Tensor<T>& dy, T beta, Tensor<T>& dbias);

}  // namespace distop::kernels
