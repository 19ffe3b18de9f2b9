#pragma once
// Dropout on the tape, with a mask that does not depend on the partitioning.

#include <cstdint>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// PyTorch's dropout: in training, each entry is zeroed with probability p and the others scaled by
// 1 / (1 - p); y lives in x's space. The mask comes from counter-based random numbers keyed by
// (seed, the entry's global row-major index) (kernels/dropout.hpp), so a distributed tensor and its
// one-rank counterpart, and replicated copies, drop the same entries; the caller draws fresh masks
// by passing a fresh seed each step (say, a base seed mixed with the step number). Not training, or
// p = 0: the identity, returning x itself (nothing recorded). Error unless 0 <= p <= 1.
//
// Local (no messages). Recorded when x requires a gradient: dx = m dy with the same mask m (the
// mask is recomputed from the seed, not stored).
template <class T>
Var<T> dropout(Tape& tape, const Var<T>& x, double p, std::uint64_t seed, bool training = true);

}  // namespace distop::nn
