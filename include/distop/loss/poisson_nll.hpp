#pragma once
// Negative log-likelihood of a Poisson distribution (torch's PoissonNLLLoss).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/loss/reduction.hpp"

namespace distop::loss {

struct PoissonNLLOptions {
  // The input is the log of the rate (true) or the rate itself (false).
  bool log_input = true;
  // Add Stirling's approximation of log(target!), where target > 1.
  bool full = false;
  // Keeps the log finite at a rate of 0 (log_input false).
  double eps = 1e-8;
  Reduction reduction = Reduction::mean;  // none, sum or mean
};

// torch's poisson_nll_loss(input, target, log_input, full, eps=eps), term by term:
//   log_input:  exp(input) - target input
//   otherwise:  input - target log(input + eps)
// plus, with full, target log(target) - target + log(2 pi target) / 2 where target > 1 (0
// elsewhere), which depends on the target alone. Reduced and distributed as loss::mse
// (loss/mse.hpp): target in the input's space, no gradient to it, saved for the backward pass;
// local. Backward: dL/dinput = exp(input) - target, or 1 - target / (input + eps), times dy. eps
// must be finite and non-negative (an Error on every rank otherwise).
template <class T>
Var<T> poisson_nll(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
                   const PoissonNLLOptions& options = {});

}  // namespace distop::loss
