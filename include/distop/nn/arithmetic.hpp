#pragma once
// Elementwise arithmetic of Vars on the tape: add, sub, mul (with the second operand broadcast
// along the batch axis) and scaling by a constant or by a scalar Var.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = a + b, a - b, a * b entry by entry on every rank's box, as torch's, with y in a's space.
// Local (no messages). b is either
//  - in a's space (any shape, any decomposition), or
//  - a row operand broadcast along a's first (batch) axis: b of global shape [1, d1, ..., dk] or
//    [d1, ..., dk] for a of global shape [N, d1, ..., dk], on a's partition, each of d1..dk split
//    exactly as a's (the same blocks over the same grid axis, or unsplit in both). Every row of a's
//    box meets this rank's box of b. Typically b is a bias replicated over the ranks that split a's
//    batch, as Linear's is.
// Anything else is an Error naming both spaces (every rank raises it alike).
//
// Gradients (recorded when an operand requires one): da = dy (add, sub), dy * b (mul); db = dy,
// -dy, dy * a. For a broadcast b, db is that summed over the rows of this rank's box of a: under
// the sum convention each rank's copy of b gets its own partial sum, so with a's batch axis split
// over ranks the copies' gradients add up to the whole batch's (a data-parallel reduction of the
// parameter sums them, as it does Linear's bias gradient).
template <class T>
Var<T> add(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> sub(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> mul(Tape& tape, const Var<T>& a, const Var<T>& b);

// y = factor x, in x's space. Local. dx = factor dy.
template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, double factor);

// y = s x for a scalar Var s (global shape [1], on x's partition: a learnable temperature, say),
// in x's space. Local. dx = s dy; ds = the sum of dy * x over this rank's box (each rank's copy of
// s gets its own partial sum, as a broadcast operand of mul does). Any other s is an Error.
template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, const Var<T>& s);

}  // namespace distop::nn
