#include "distop/optim/adam.hpp"

#include "adam_common.hpp"

namespace distop::optim {

void AdamRule::check(const Options& o) { detail::check_adam(kName, o); }

StateKeys AdamRule::state_keys(const Options& o) { return detail::adam_state_keys(o); }

template <class T>
void AdamRule::init_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                          const Options& o) {
  detail::init_adam_state<T>(state, value, o);
}

template <class T>
void AdamRule::update(Tensor<T>& value, const Tensor<T>& grad,
                      typename OptimizerState<T>::Param& state, const Options& o) {
  detail::adam_update<T>(value, grad, state, o, /*decoupled=*/false);
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template void AdamRule::init_state(OptimizerState<T>::Param&, const Tensor<T>&, const Options&); \
  template void AdamRule::update(Tensor<T>&, const Tensor<T>&, OptimizerState<T>::Param&,          \
                                 const Options&);                                                  \
  template class BasicOptimizer<T, AdamRule>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::optim
