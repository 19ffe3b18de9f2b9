#pragma once
// Embedding lookups of local tensors: rows of a weight table picked by integer-valued indices, and
// the adjoint, which adds gradient rows back into the table. The kernels behind nn/embedding.hpp.
// The table may be one rank's block of rows of a larger one (a vocabulary split across ranks):
// `offset` is the global index of its first row, and indices outside its rows pick nothing.

#include <cstdint>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// The position (row-major) of the first entry of `indices` that is not an integer in [0, limit),
// or -1 when every entry is one.
template <class T>
std::int64_t first_invalid_index(const Tensor<T>& indices, std::int64_t limit);

// y[i, :] = weight[indices[i] - offset, :] where offset <= indices[i] < offset + rows, else 0;
// indices holds integer values (any shape of n entries), weight is [rows, d], y [n, d]. Overwrites
// y.
template <class T>
void embedding_forward(const Tensor<T>& indices, const Tensor<T>& weight, std::int64_t offset,
                       Tensor<T>& y);

// dweight = beta dweight + the adjoint of embedding_forward applied to dy [n, d]: row v of dweight
// gets the sum, in the order of i, of dy[i, :] over every i with indices[i] = offset + v, except
// where offset + v = `skip` (torch's padding_idx, whose row gets no gradient; -1 for none).
template <class T>
void embedding_backward(const Tensor<T>& indices, const Tensor<T>& dy, std::int64_t offset,
                        std::int64_t skip, T beta, Tensor<T>& dweight);

}  // namespace distop::kernels
