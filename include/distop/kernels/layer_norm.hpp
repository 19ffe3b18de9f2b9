#pragma once
// Layer normalisation kernels over the rows of a local tensor [rows, n] (the last axis of a layer's
// input), the kernels behind nn/layer_norm.hpp. A row may be one rank's part of a longer row split
// over several ranks: the statistics are then combined from every part's moments, and the row
// sums of the backward pass are summed over the parts. Each row is worked on by a team of threads
// (one thread on the host), its sums kept in double. Row statistics are Tensor<double> [rows, 2]:
// (mean, invstd) with invstd = 1 / sqrt(var + eps), var the biased variance of the whole row.
// weight and bias are [n] (this part's entries), or empty (numel 0) for weight 1 and bias 0. A
// shape mismatch is an Error.

#include <cstdint>
#include <vector>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// moments[r, 0] = the mean of x[r, :] and moments[r, 1] = the sum of (x[r, j] - mean)^2 (two
// passes over the row, so no cancellation); both 0 for rows of no entries. Overwrites moments
// ([rows, 2]).
template <class T>
void layer_norm_moments(const Tensor<T>& x, Tensor<double>& moments);

// stats [rows, 2] = (mean, invstd) of rows made of P parts: `parts` [P, rows, 2] holds each part's
// moments (layer_norm_moments) and counts[p] (host, P entries) its entries per row. The parts are
// combined in the order p = 0, 1, ... by Chan, Golub and LeVeque's pairwise update (stable: no
// sums of squares), so every rank that combines the same parts gets the same bits. Error unless
// the counts add up to at least 1.
void layer_norm_stats(const Tensor<double>& parts, const std::vector<std::int64_t>& counts,
                      double eps, Tensor<double>& stats);

// y = (x - mean) invstd weight + bias, row by row. Overwrites y (x's shape; may alias x).
template <class T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<double>& stats, const Tensor<T>& weight,
                        const Tensor<T>& bias, Tensor<T>& y);

// sums[r, 0] = the sum over j of g = dy weight, sums[r, 1] = the sum of g xhat with
// xhat = (x - mean) invstd: the two row reductions of the input gradient, over this part of each
// row. Overwrites sums ([rows, 2]).
template <class T>
void layer_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                              const Tensor<T>& weight, Tensor<double>& sums);

// dx = beta dx + invstd (g - sums[r, 0] / count - xhat sums[r, 1] / count), with g = dy weight,
// given the sums over the whole row (of `count` entries). dx may alias dy.
template <class T>
void layer_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                               const Tensor<T>& weight, const Tensor<double>& sums, double count,
                               T beta, Tensor<T>& dx);

// dweight[j] = beta dweight[j] + the sum over rows of dy[r, j] xhat[r, j] (the weight's gradient;
// the bias's is sum_rows of dy, kernels/elementwise.hpp). Each entry sums its column in row order.
template <class T>
void layer_norm_weight_grad(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                            T beta, Tensor<T>& dweight);

}  // namespace distop::kernels
