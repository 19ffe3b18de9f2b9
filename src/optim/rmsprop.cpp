#include "distop/optim/rmsprop.hpp"

#include "checks.hpp"
#include "distop/kernels/optim.hpp"

namespace distop::optim {

void RMSpropRule::check(const Options& o) {
  detail::check_lr(kName, o.lr);
  detail::check_non_negative(kName, "alpha", o.alpha);
  detail::check_non_negative(kName, "eps", o.eps);
  detail::check_non_negative(kName, "weight_decay", o.weight_decay);
  detail::check_non_negative(kName, "momentum", o.momentum);
  detail::warn_unless(o.alpha < 1, kName, "alpha", o.alpha,
                      "not below 1: the running average of squared gradients then never takes "
                      "them in (1) or turns negative (above 1), and the updates divide by eps or "
                      "become NaN");
  detail::warn_unless(o.momentum <= 1, kName, "momentum", o.momentum,
                      "above 1: the momentum buffer, and with it each update, grows geometrically");
}

StateKeys RMSpropRule::state_keys(const Options& o) {
  StateKeys keys{{"square_avg"}, {"step"}};
  if (o.momentum > 0) keys.tensors.emplace_back("momentum_buffer");
  if (o.centered) keys.tensors.emplace_back("grad_avg");
  return keys;
}

template <class T>
void RMSpropRule::init_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                             const Options& o) {
  state.tensors.emplace("square_avg", Tensor<T>(value.shape(), "distop::square_avg"));
  if (o.momentum > 0)
    state.tensors.emplace("momentum_buffer", Tensor<T>(value.shape(), "distop::momentum_buffer"));
  if (o.centered) state.tensors.emplace("grad_avg", Tensor<T>(value.shape(), "distop::grad_avg"));
  state.scalars.emplace("step", 0.0);
}

template <class T>
void RMSpropRule::update(Tensor<T>& value, const Tensor<T>& grad,
                         typename OptimizerState<T>::Param& state, const Options& o) {
  state.scalars.at("step") += 1;
  Tensor<T> none;
  kernels::rmsprop_step(value, grad, state.tensors.at("square_avg"),
                        o.centered ? state.tensors.at("grad_avg") : none,
                        o.momentum > 0 ? state.tensors.at("momentum_buffer") : none,
                        kernels::RmspropStep{.lr = o.lr,
                                             .alpha = o.alpha,
                                             .eps = o.eps,
                                             .weight_decay = o.weight_decay,
                                             .momentum = o.momentum,
                                             .centered = o.centered,
                                             .maximize = o.maximize});
}

#define DISTOP_INSTANTIATE(T)                                                                \
  template void RMSpropRule::init_state(OptimizerState<T>::Param&, const Tensor<T>&,         \
                                        const Options&);                                     \
  template void RMSpropRule::update(Tensor<T>&, const Tensor<T>&, OptimizerState<T>::Param&, \
                                    const Options&);                                         \
  template class BasicOptimizer<T, RMSpropRule>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::optim
