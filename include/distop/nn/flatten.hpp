#pragma once
// Flatten: [N, C, s_1..s_d] -> [N, C s_1..s_d] on every rank's box.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// The space of x's flattened form: global shape [N, F] with F the product of x's extents after the
// first, on x's partition, the batch axis split exactly as x's (same blocks on the same grid axis)
// and the feature axis whole. Error unless x has rank >= 2 and only its batch axis is split (the
// trailing axes whole on every rank, so each box flattens to a box). Metadata only, no messages.
TensorSpace flatten_space(const TensorSpace& x);

// PyTorch's nn.Flatten (start_dim = 1): y in `out_space`, whose box on every rank must be x's box
// [n, c, s...] seen as [n, c s...] (checked on metadata for every rank, no messages); usually
// out_space = flatten_space(x.space()), built once. y shares x's storage, as nn::reinterpret does
// (which cannot serve here: it keeps the box's rank). Recorded when x requires a gradient: dx = dy
// seen in x's shape.
template <class T>
Var<T> flatten(Tape& tape, const Var<T>& x, const TensorSpace& out_space);
// The same into flatten_space(x.space()).
template <class T>
Var<T> flatten(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
