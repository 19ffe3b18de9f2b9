#pragma once
// Log-softmax over the last axis on the tape.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = x - log sum_j exp(x_j) over the last axis, computed stably (kernels/softmax.hpp), on every
// rank's box of x [..., classes]; the last axis must be unsplit (each row on one rank), the others
// may be split any way. y lives in x's space. Local (no messages). Recorded when x requires a
// gradient: dx = dy - exp(y) (the row sum of dy).
template <class T>
Var<T> log_softmax(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
