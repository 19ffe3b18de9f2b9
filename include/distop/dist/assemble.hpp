#pragma once
// Moving whole (global) tensors in and out of their distributed boxes, for checkpoints and
// references: not a hot path.

#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace distop {

// The global tensor, in row-major order, on parent rank `root` (an empty vector elsewhere). Each
// box is taken once, from the rank that holds it with coordinate 0 along every replicating grid
// axis. Collective over the space's parent.
template <class T>
std::vector<T> assemble(const DistTensor<T>& x, int root = 0);

// Overwrites every rank's box (replicated copies included) with its part of `global`, a row-major
// host copy of the whole tensor that each rank holds. Not collective.
template <class T>
void distribute(const std::vector<T>& global, DistTensor<T>& x);

}  // namespace distop
