#pragma once
// Internal: what Adam and AdamW share (their options have the same members).

#include "checks.hpp"
#include "distop/kernels/optim.hpp"
#include "distop/optim/optimizer.hpp"

namespace distop::optim::detail {

template <class Options>
void check_adam(const char* op, const Options& o) {
  check_lr(op, o.lr);
  check_beta(op, "beta1", o.betas[0]);
  check_beta(op, "beta2", o.betas[1]);
  check_non_negative(op, "eps", o.eps);
  check_non_negative(op, "weight_decay", o.weight_decay);
}

template <class Options>
StateKeys adam_state_keys(const Options& o) {
  StateKeys keys{{"exp_avg", "exp_avg_sq"}, {"step"}};
  if (o.amsgrad) keys.tensors.emplace_back("max_exp_avg_sq");
  return keys;
}

template <class T, class Options>
void init_adam_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                     const Options& o) {
  state.tensors.emplace("exp_avg", Tensor<T>(value.shape(), "distop::exp_avg"));
  state.tensors.emplace("exp_avg_sq", Tensor<T>(value.shape(), "distop::exp_avg_sq"));
  if (o.amsgrad)
    state.tensors.emplace("max_exp_avg_sq", Tensor<T>(value.shape(), "distop::max_exp_avg_sq"));
  state.scalars.emplace("step", 0.0);
}

template <class T, class Options>
void adam_update(Tensor<T>& value, const Tensor<T>& grad, typename OptimizerState<T>::Param& state,
                 const Options& o, bool decoupled) {
  double& step = state.scalars.at("step");
  step += 1;
  Tensor<T> none;
  kernels::adam_step(value, grad, state.tensors.at("exp_avg"), state.tensors.at("exp_avg_sq"),
                     o.amsgrad ? state.tensors.at("max_exp_avg_sq") : none,
                     kernels::AdamStep{.lr = o.lr,
                                       .beta1 = o.betas[0],
                                       .beta2 = o.betas[1],
                                       .eps = o.eps,
                                       .weight_decay = o.weight_decay,
                                       .amsgrad = o.amsgrad,
                                       .maximize = o.maximize,
                                       .decoupled = decoupled,
                                       .step = step});
}

}  // namespace distop::optim::detail
