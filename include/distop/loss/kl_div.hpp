#pragma once
// Kullback-Leibler divergence (torch's KLDivLoss).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/loss/reduction.hpp"

namespace distop::loss {

struct KLDivOptions {
  // none, sum, mean (over every entry, as torch's 'mean') or batchmean (over the global batch,
  // global shape[0]: the divergence's mathematical definition for rows of distributions).
  Reduction reduction = Reduction::mean;
  // The target is given as log-probabilities too.
  bool log_target = false;
};

// torch's kl_div(input, target, log_target=log_target), `input` holding log-probabilities, term by
// term:
//   log_target false:  target (log(target) - input), 0 where target is 0 (torch's xlogy)
//   log_target true:   exp(target) (target - input)
// reduced (loss/reduction.hpp; batchmean divides the sum by the global shape[0]) and distributed as
// loss::mse (loss/mse.hpp): target in the input's space, no gradient to it, saved for the backward
// pass; local. Backward: dL/dinput = -target, or -exp(target), times dy.
template <class T>
Var<T> kl_div(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
              const KLDivOptions& options = {});

}  // namespace distop::loss
