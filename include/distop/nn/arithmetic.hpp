#pragma once
// Elementwise arithmetic of Vars on the tape: add, sub, mul and div with torch's broadcasting of
// the second operand, adding a constant, and scaling by a constant or by a scalar Var.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = a + b, a - b, a * b, a / b entry by entry on every rank's box, as torch's, with y in a's
// space. Local (no messages). b broadcasts against a by torch's rules: b's axes are aligned with
// a's trailing ones, each of b's global extents equals a's or is 1, and b may have fewer axes (the
// weight [D] of a LayerNorm against [N, ..., D], a mean [N, 1] taken with keepdim against [N, D]).
// b is either
//  - aligned with a: on a's partition, each of b's axes of a's extent split exactly as a's (the
//  same
//    blocks over the same grid axis, or unsplit in both; b in a's space is the simplest case), so
//    that each rank's box of b broadcasts against its box of a. b's broadcast axes (extent 1) and
//    the axes it lacks hold nothing to split: b is replicated along whatever splits them, as a bias
//    is along a split batch; or
//  - held whole on every rank that holds a box of a: unsplit, replicated on a's partition or a copy
//    on each process (Partition::self, as local layers keep their parameters). Each rank then
//    uses the part of b that meets its box of a.
// Anything else (shapes that do not broadcast, b split unlike a, b on other ranks) is an Error
// naming both spaces, raised alike on every rank (the checks read the spaces' metadata only).
//
// Gradients (recorded when an operand requires one): da = dy (add, sub), dy * b (mul), dy / b
// (div); db = dy, -dy, dy * a, -dy * a / b^2, summed over the axes along which b broadcasts in this
// rank's box of a (and zero on the entries of a whole b that do not meet that box). Under the sum
// convention each rank's copy of b is its own component and gets its own partial sum, so with a's
// batch axis split over ranks the copies' gradients add up to the whole batch's (a data-parallel
// reduction of the parameter sums them, as it does Linear's bias gradient).
template <class T>
Var<T> add(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> sub(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> mul(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> div(Tape& tape, const Var<T>& a, const Var<T>& b);

// y = x + s for a constant s (torch's x + s, the eps of a normalisation), in x's space. Local.
// dx = dy.
template <class T>
Var<T> add(Tape& tape, const Var<T>& x, double s);

// y = factor x, in x's space. Local. dx = factor dy.
template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, double factor);

// y = s x for a scalar Var s of global shape [1] (a learnable temperature, say), in x's space: mul
// with s broadcast, under its rules (s on x's partition, or a copy on each process). Local.
// dx = s dy; ds = the sum of dy * x over this rank's box (each rank's copy of s gets its own
// partial sum). Any other s is an Error.
template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, const Var<T>& s);

}  // namespace distop::nn
