#pragma once
// The transpose of a 2-D Var on the tape.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = x^T for x of global shape [m, n], decomposed any way: y [n, m] takes x's decomposition with
// the two axes' splits swapped (the grid axis and blocks that split x's rows split y's columns,
// and the other way round), so that each rank transposes its own box and no entry moves between
// ranks. Local (no messages). dx = dy^T. An x of another rank is an Error.
template <class T>
Var<T> transpose(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
