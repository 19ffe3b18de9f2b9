#pragma once
// Softmax, log-softmax and softmax cross-entropy over the last axis of 2-D logits [rows, classes],
// computed stably (the row maximum is subtracted before exponentiating, the row statistics are
// kept in double). Each row is worked on by a team of threads (one thread on the host), so that
// rows of 10^4-10^5 classes are reduced in parallel on a GPU.

#include <cstdint>
#include <vector>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// Labels are one class index per row, in [0, classes); a label count other than the number of rows
// or a label out of range is an Error naming the offending row.

// probs = softmax(logits) row by row, overwriting probs (same shape; may alias logits).
template <class T>
void softmax(const Tensor<T>& logits, Tensor<T>& probs);
// out = log softmax(logits) row by row, overwriting out (same shape; may alias logits).
template <class T>
void log_softmax(const Tensor<T>& logits, Tensor<T>& out);
// dx = beta dx + dout - exp(out) (the row sum of dout): the input gradient of log_softmax, given
// its output out (same shape as dout and dx; dx may alias dout).
template <class T>
void log_softmax_backward(const Tensor<T>& out, const Tensor<T>& dout, T beta, Tensor<T>& dx);

// dx = beta dx + probs (dprobs - (the row sum of dprobs probs)): the input gradient of softmax,
// given its output probs (same shape as dprobs and dx; dx may alias dprobs).
template <class T>
void softmax_backward(const Tensor<T>& probs, const Tensor<T>& dprobs, T beta, Tensor<T>& dx);

// y = x with -inf where a causal mask hides the entry: x [rows, n] holds matrices of `matrix_rows`
// consecutive rows each (the box of an [..., S, n] tensor whose second-to-last axis starts at
// global row `row_offset`), and entry j of a matrix's row i is hidden where j > row_offset + i.
// Overwrites y (x's shape; may alias x). Then softmax gives causal attention weights.
template <class T>
void causal_mask(const Tensor<T>& x, std::int64_t matrix_rows, std::int64_t row_offset,
                 Tensor<T>& y);

// The sum over rows of -log softmax(logits)[row, label[row]], accumulated in double. When probs is
// given (same shape as logits, not aliasing it) it receives softmax(logits), for the backward pass.
template <class T>
double softmax_cross_entropy(const Tensor<T>& logits, const std::vector<std::int32_t>& labels,
                             Tensor<T>* probs = nullptr);
// dlogits = scale (probs - onehot(labels)): the gradient of scale times the summed cross-entropy,
// given probs = softmax(logits). Overwrites dlogits (same shape; may alias probs).
template <class T>
void softmax_cross_entropy_backward(const Tensor<T>& probs, const std::vector<std::int32_t>& labels,
                                    T scale, Tensor<T>& dlogits);

// The number of rows whose argmax (the first, on ties) equals the label.
template <class T>
std::int64_t count_correct(const Tensor<T>& logits, const std::vector<std::int32_t>& labels);

}  // namespace distop::kernels
