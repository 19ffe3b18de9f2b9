#pragma once
// Softmax over the last axis on the tape (log_softmax is in nn/log_softmax.hpp).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = exp(x) / sum_j exp(x_j) over the last axis, computed stably (kernels/softmax.hpp: the row
// maximum subtracted, the row statistics in double), on every rank's box of x [..., classes]; the
// last axis must be unsplit (each row on one rank), the others may be split any way. y lives in
// x's space. Local (no messages). Recorded when x requires a gradient: dx = y (dy - (the row sum
// of dy y)). An x whose last axis is split is an Error.
template <class T>
Var<T> softmax(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
