#pragma once
// The dropout mask, drawn from counter-based random numbers keyed by each entry's global index.

#include <cstdint>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/core/tensor.hpp"

namespace distop::kernels {

// y = beta y + m x entry by entry, where x is the box at `offset` of a global tensor of shape
// `global` (x's rank, at most 8 axes) and the entry at global row-major index g gets
//   m = 1 / (1 - p)  if random::uniform(seed, g) >= p,  else 0
// (m = 0 everywhere when p = 1). The mask depends on (seed, g) alone, so every partitioning of the
// tensor, and every replicated copy, draws the same one. For a fixed mask this is a diagonal map,
// its own adjoint: the backward pass is the same call on the output gradient. y may alias x when
// beta is 0. Error unless 0 <= p <= 1 and the shapes fit.
template <class T>
void dropout(const Tensor<T>& x, const Shape& global, const std::vector<std::int64_t>& offset,
             double p, std::uint64_t seed, T beta, Tensor<T>& y);

}  // namespace distop::kernels
