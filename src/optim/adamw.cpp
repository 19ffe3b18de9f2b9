#include "distop/optim/adamw.hpp"

#include "adam_common.hpp"

namespace distop::optim {

void AdamWRule::check(const Options& o) { detail::check_adam(kName, o); }

StateKeys AdamWRule::state_keys(const Options& o) { return detail::adam_state_keys(o); }

template <class T>
void AdamWRule::init_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                           const Options& o) {
  detail::init_adam_state<T>(state, value, o);
}

template <class T>
void AdamWRule::update(Tensor<T>& value, const Tensor<T>& grad,
                       typename OptimizerState<T>::Param& state, const Options& o) {
  detail::adam_update<T>(value, grad, state, o, /*decoupled=*/true);
}

#define DISTOP_INSTANTIATE(T)                                                              \
  template void AdamWRule::init_state(OptimizerState<T>::Param&, const Tensor<T>&,         \
                                      const Options&);                                     \
  template void AdamWRule::update(Tensor<T>&, const Tensor<T>&, OptimizerState<T>::Param&, \
                                  const Options&);                                         \
  template class BasicOptimizer<T, AdamWRule>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::optim
