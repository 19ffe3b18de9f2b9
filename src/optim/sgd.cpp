#include "distop/optim/sgd.hpp"

#include "checks.hpp"
#include "distop/kernels/optim.hpp"

namespace distop::optim {

void SGDRule::check(const Options& o) {
  detail::check_lr(kName, o.lr);
  detail::check_non_negative(kName, "momentum", o.momentum);
  DISTOP_CHECK(std::isfinite(o.dampening), kName, "option dampening must be finite, found ",
               o.dampening);
  detail::check_non_negative(kName, "weight_decay", o.weight_decay);
  DISTOP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), kName,
               "option nesterov needs momentum > 0 and dampening 0, found momentum ", o.momentum,
               " and dampening ", o.dampening);
  detail::warn_unless(o.momentum <= 1, kName, "momentum", o.momentum,
                      "above 1: the momentum buffer, and with it each update, grows geometrically");
  detail::warn_unless(o.dampening >= 0 && o.dampening <= 1, kName, "dampening", o.dampening,
                      "outside [0, 1]: the gradient enters the momentum buffer weighted by 1 - "
                      "dampening, which is then negative (an ascent) or above 1");
}

StateKeys SGDRule::state_keys(const Options& o) {
  if (o.momentum == 0) return {};
  return {{"momentum_buffer"}, {}};
}

template <class T>
void SGDRule::init_state(typename OptimizerState<T>::Param&, const Tensor<T>&, const Options&) {
  // The momentum buffer starts as the first step's gradient (update makes it).
}

template <class T>
void SGDRule::update(Tensor<T>& value, const Tensor<T>& grad,
                     typename OptimizerState<T>::Param& state, const Options& o) {
  kernels::SgdStep s{.lr = o.lr,
                     .momentum = o.momentum,
                     .dampening = o.dampening,
                     .weight_decay = o.weight_decay,
                     .nesterov = o.nesterov,
                     .maximize = o.maximize,
                     .first = false};
  if (o.momentum == 0) {
    Tensor<T> none;
    kernels::sgd_step(value, grad, none, s);
    return;
  }
  auto it = state.tensors.find("momentum_buffer");
  if (it == state.tensors.end()) {
    it = state.tensors
             .emplace("momentum_buffer",
                      Tensor<T>::uninitialized(value.shape(), "distop::momentum_buffer"))
             .first;
    s.first = true;
  }
  kernels::sgd_step(value, grad, it->second, s);
}

#define DISTOP_INSTANTIATE(T)                                                                     \
  template void SGDRule::init_state(OptimizerState<T>::Param&, const Tensor<T>&, const Options&); \
  template void SGDRule::update(Tensor<T>&, const Tensor<T>&, OptimizerState<T>::Param&,          \
                                const Options&);                                                  \
  template class BasicOptimizer<T, SGDRule>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::optim
