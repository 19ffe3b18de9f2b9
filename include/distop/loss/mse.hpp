#pragma once
// Mean squared error.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::loss {

// PyTorch's mse_loss(x, target) with reduction 'mean': the sum of (x - target)^2 over every
// global entry, divided by the global element count. target must live in x's space.
//
// Returns the loss in distop's loss convention (docs/losses.md): a Var of shape [1] replicated
// over x's partition, each rank's component its local sum of squares divided by the global element
// count (the loss is the sum of the components, loss::total; replicated copies of x each count;
// ranks outside the partition hold an empty tensor). Local (no messages). Backward adds
// dL/d(component) 2 (x - target) / numel to x's gradient.
template <class T>
Var<T> mse(Tape& tape, const Var<T>& x, const DistTensor<T>& target);

}  // namespace distop::loss
