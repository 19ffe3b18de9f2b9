#pragma once
// Soft Dice loss over a whole distributed tensor (the segmentation loss of U-Nets).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::loss {

struct DiceOptions {
  // Added to the numerator and the denominator: keeps the loss finite (and 0) where input and
  // target are both empty. Finite and non-negative.
  double smooth = 1.0;
};

// The soft Dice loss of probabilities `input` (a sigmoid's output, say) against a target in [0, 1]
// (a mask), over every entry of the global tensor:
//   L = 1 - (2 sum(input target) + smooth) / (sum(input) + sum(target) + smooth).
// target lives in the input's space (any partition, balanced or not; an Error on every rank
// otherwise); it receives no gradient, and its local tensor is saved for the backward pass. Every
// global entry counts once per copy (a replicated axis counts each copy).
//
// The sums are global: each rank sums its box, and one allreduce of the two partial sums
// (sum(input target), sum(input) + sum(target)) over the input's partition gives every rank of it
// the global sums. Returns a loss in distop's convention (docs/losses.md): a [1] Var replicated
// over the input's partition whose first rank (index 0) holds L and the others 0, as the
// contrastive losses' gather strategy does. Backward (collective over the partition: one
// allreduce of a double, which hands every rank the first rank's seed dy): dL/dinput_i =
// dy ((2I + smooth) / U^2 - 2 target_i / U), where I = sum(input target) and U = sum(input) +
// sum(target) + smooth. Collective over the input's partition; ranks outside it (holding empty
// tensors) send nothing and hold an empty tensor.
template <class T>
Var<T> dice(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
            const DiceOptions& options = {});

}  // namespace distop::loss
