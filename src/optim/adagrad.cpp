#include "distop/optim/adagrad.hpp"

#include "checks.hpp"
#include "distop/kernels/optim.hpp"

namespace distop::optim {

void AdagradRule::check(const Options& o) {
  detail::check_lr(kName, o.lr);
  detail::check_non_negative(kName, "lr_decay", o.lr_decay);
  detail::check_non_negative(kName, "weight_decay", o.weight_decay);
  detail::check_non_negative(kName, "initial_accumulator_value", o.initial_accumulator_value);
  detail::check_non_negative(kName, "eps", o.eps);
}

StateKeys AdagradRule::state_keys(const Options&) { return {{"sum"}, {"step"}}; }

template <class T>
void AdagradRule::init_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                             const Options& o) {
  Tensor<T> sum = Tensor<T>::uninitialized(value.shape(), "distop::sum");
  sum.fill(static_cast<T>(o.initial_accumulator_value));
  state.tensors.emplace("sum", std::move(sum));
  state.scalars.emplace("step", 0.0);
}

template <class T>
void AdagradRule::update(Tensor<T>& value, const Tensor<T>& grad,
                         typename OptimizerState<T>::Param& state, const Options& o) {
  double& step = state.scalars.at("step");
  step += 1;
  kernels::adagrad_step(value, grad, state.tensors.at("sum"),
                        kernels::AdagradStep{.lr = o.lr,
                                             .lr_decay = o.lr_decay,
                                             .weight_decay = o.weight_decay,
                                             .eps = o.eps,
                                             .maximize = o.maximize,
                                             .step = step});
}

#define DISTOP_INSTANTIATE(T)                                                                \
  template void AdagradRule::init_state(OptimizerState<T>::Param&, const Tensor<T>&,         \
                                        const Options&);                                     \
  template void AdagradRule::update(Tensor<T>&, const Tensor<T>&, OptimizerState<T>::Param&, \
                                    const Options&);                                         \
  template class BasicOptimizer<T, AdagradRule>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::optim
