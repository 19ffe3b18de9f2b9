#pragma once
// Tape-recorded building blocks shared by layers.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/matmul.hpp"  // matmul_nt, which layers use with these

namespace distop::nn {

// y[i, :] = x[i, :] + b on every rank's boxes: x [rows, n], b [n]. Records dx = dy, db = column
// sums of dy.
template <class T>
Var<T> add_bias(Tape& tape, const Var<T>& x, const Var<T>& b);

// The same storage seen in another space with the same box on every rank (no copy); the gradient
// is seen back in the original space.
template <class T>
Var<T> reinterpret(Tape& tape, const Var<T>& x, const TensorSpace& space);

}  // namespace distop::nn
