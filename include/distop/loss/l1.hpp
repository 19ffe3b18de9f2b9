#pragma once
// Mean absolute error (torch's L1Loss).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/loss/reduction.hpp"

namespace distop::loss {

struct L1Options {
  Reduction reduction = Reduction::mean;  // none, sum or mean
};

// torch's l1_loss(input, target): the terms |input - target|, reduced (loss/reduction.hpp).
// target lives in the input's space (any partition, balanced or not; an Error on every rank
// otherwise); it receives no gradient, and its local tensor is saved for the backward pass (not
// copied: it must not change before then).
//
// With reduction none, the terms as a Var in the input's space; else a loss in distop's convention
// (docs/losses.md): a [1] Var replicated over the input's partition, each rank's component its
// box's sum (over the global element count for mean). Local: no messages. Backward:
// dL/dinput = sign(input - target) (0 where they are equal, as torch), times dy.
template <class T>
Var<T> l1(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
          const L1Options& options = {});

}  // namespace distop::loss
