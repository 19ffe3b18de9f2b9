#pragma once
// Elementwise activations on the tape.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = f(x) entry by entry on every rank's box; y lives in x's space. Local (no messages). Recorded
// when x requires a gradient, adding dy * f'(x) to x's gradient: relu, gelu and silu save their
// input, sigmoid and tanh their output. The functions are those of kernels/elementwise.hpp.
template <class T>
Var<T> relu(Tape& tape, const Var<T>& x);
template <class T>
Var<T> sigmoid(Tape& tape, const Var<T>& x);
template <class T>
Var<T> tanh(Tape& tape, const Var<T>& x);

// torch.nn.functional.gelu's `approximate`: the exact form x Phi(x) (erf) or its tanh
// approximation.
enum class GeluApproximate { none, tanh };

// GELU, y = x Phi(x) (approximate none) or x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 (tanh).
template <class T>
Var<T> gelu(Tape& tape, const Var<T>& x, GeluApproximate approximate = GeluApproximate::none);
// SiLU (swish), y = x sigmoid(x).
template <class T>
Var<T> silu(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
