#pragma once
// Joining Vars along an axis, and cutting one into pieces along an axis, on the tape.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = torch.cat(xs, dim=axis): at least one x, all on one partition, of one rank and the same
// global extents except along `axis` (counted from 0 or from the end), which must be unsplit in
// every x; each other axis split as xs[0]'s (the same blocks over the same grid axis). y's space is
// xs[0]'s with the extents along `axis` added up, so each rank joins its own boxes. Local (no
// messages). dx_i = the slice of dy that x_i filled. Anything else is an Error naming the input.
template <class T>
Var<T> concat(Tape& tape, const std::vector<Var<T>>& xs, int axis);
// concat(tape, {a, b}, axis), T deduced from the Vars listed.
template <class T>
Var<T> concat(Tape& tape, std::initializer_list<Var<T>> xs, int axis) {
  return concat(tape, std::vector<Var<T>>(xs), axis);
}

// torch.split(x, sizes, dim=axis): pieces of x along `axis` (which must be unsplit) of the given
// extents (each >= 0, adding up to x's extent), each in x's space with that extent along `axis`
// (the other axes keep x's split). Local (no messages). dx = the pieces' gradients side by side
// (zeros for a piece no gradient reached).
template <class T>
std::vector<Var<T>> split(Tape& tape, const Var<T>& x, const std::vector<std::int64_t>& sizes,
                          int axis);

// torch.chunk(x, chunks, dim=axis): split into pieces of ceil(n / chunks) entries along `axis`,
// the last one smaller, so there may be fewer than `chunks` pieces (5 entries in 4 chunks give
// 2, 2, 1); n = 0 gives `chunks` empty pieces. chunks must be >= 1. As split otherwise.
template <class T>
std::vector<Var<T>> chunk(Tape& tape, const Var<T>& x, std::int64_t chunks, int axis);

}  // namespace distop::nn
