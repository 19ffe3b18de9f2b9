#pragma once
// Mean squared error (torch's MSELoss).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/loss/reduction.hpp"

namespace distop::loss {

struct MSEOptions {
  Reduction reduction = Reduction::mean;  // none, sum or mean
};

// torch's mse_loss(input, target): the terms (input - target)^2, reduced (loss/reduction.hpp);
// by default the sum over every global entry divided by the global element count. target lives
// in the input's space (any partition; an Error on every rank otherwise); it receives no gradient,
// and its local tensor is saved for the backward pass (not copied: it must not change before
// then).
//
// With reduction none, the terms as a Var in the input's space; else a loss in distop's convention
// (docs/losses.md): a [1] Var replicated over the input's partition, each rank's component its
// box's sum of squares (over the global element count for mean; replicated copies of the input
// each count; ranks outside the partition hold an empty tensor). Local: no messages. Backward:
// dL/dinput = 2 (input - target), times dy.
template <class T>
Var<T> mse(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
           const MSEOptions& options = {});

}  // namespace distop::loss
