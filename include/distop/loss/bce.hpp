#pragma once
// Binary cross-entropy of probabilities (torch's BCELoss) and of logits (BCEWithLogitsLoss).

#include <optional>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/tensor.hpp"
#include "distop/loss/reduction.hpp"

namespace distop::loss {

struct BCEOptions {
  Reduction reduction = Reduction::mean;  // none, sum or mean
};

template <class T>
struct BCEWithLogitsOptions {
  Reduction reduction = Reduction::mean;  // none, sum or mean
  // The weight of the positive term, broadcast against the input's global shape by torch's rules
  // (aligned with its trailing axes, each extent the input's or 1, fewer axes allowed): [C]
  // weights the last axis' C classes, [C, 1, 1] the channels of an [N, C, H, W] input. Held whole
  // on every rank (in the default memory space); none: every weight 1.
  std::optional<Tensor<T>> pos_weight = std::nullopt;
};

// torch's binary_cross_entropy(input, target): for probabilities `input` and targets in [0, 1],
// the terms
//   -(target max(log(input), -100) + (1 - target) max(log(1 - input), -100))
// (torch clamps each log at -100, so that an input of exactly 0 or 1 gives a finite loss), reduced
// (loss/reduction.hpp) and distributed as loss::mse (loss/mse.hpp): target in the input's space,
// no gradient to it, saved for the backward pass. Backward, as torch:
// dL/dinput = (input - target) / max(input (1 - input), 1e-12), times dy.
//
// Like torch, an input or target entry outside [0, 1] (or NaN) is an Error; since the entries
// differ from rank to rank, the ranks agree on it (one small allreduce over the parent
// communicator of the input's partition, whose every rank calls), so that every rank throws it.
template <class T>
Var<T> bce(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
           const BCEOptions& options = {});

// torch's binary_cross_entropy_with_logits(input, target, pos_weight=pos_weight): for logits
// `input`, with w = 1 + (pos_weight - 1) target, the terms
//   (1 - target) input + w (log(1 + exp(-|input|)) + max(-input, 0))
// (= -(pos_weight target log sigmoid(input) + (1 - target) log(1 - sigmoid(input))), in torch's
// form that overflows nowhere), reduced and distributed as loss::mse: target in the input's space,
// no gradient to it or to pos_weight; local. Backward: dL/dinput = w sigmoid(input) -
// pos_weight target, times dy. A pos_weight that does not broadcast against the input is an Error
// on every rank.
template <class T>
Var<T> bce_with_logits(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
                       const BCEWithLogitsOptions<T>& options = {});

}  // namespace distop::loss
