#pragma once
// Elementwise activations on the tape.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = f(x) entry by entry on every rank's box; y lives in x's space. Local (no messages). Recorded
// when x requires a gradient, adding dy * f'(x) to x's gradient: relu saves its input, sigmoid and
// tanh their output.
template <class T>
Var<T> relu(Tape& tape, const Var<T>& x);
template <class T>
Var<T> sigmoid(Tape& tape, const Var<T>& x);
template <class T>
Var<T> tanh(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
