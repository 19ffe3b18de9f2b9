#pragma once
// Stochastic gradient descent: torch.optim.SGD, with momentum, dampening, Nesterov momentum, weight
// decay and maximize.

#include "distop/optim/basic_optimizer.hpp"

namespace distop::optim {

// torch.optim.SGD's options and defaults.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// torch's _single_tensor_sgd, for each parameter p with a gradient:
//   g = maximize ? -grad : grad
//   if weight_decay != 0:  g = g + weight_decay p
//   if momentum != 0:      buf = g on the parameter's first step, else momentum buf + (1 -
//   dampening) g
//                          g = nesterov ? g + momentum buf : buf
//   p = p - lr g
// State: "momentum_buffer" once stepped with momentum (none without). Options are checked as torch
// checks them, and finite: lr, momentum and weight_decay >= 0; Nesterov needs momentum > 0 and
// dampening 0. Momentum above 1 and dampening outside [0, 1], which torch accepts, are warned of
// (optim::warn_once).
struct SGDRule {
  using Options = SGDOptions;
  static constexpr const char* kName = "SGD";
  static constexpr bool kEagerState = false;
  template <class O, class F>
  static void visit(O& o, F&& f) {
    f("lr", o.lr);
    f("momentum", o.momentum);
    f("dampening", o.dampening);
    f("weight_decay", o.weight_decay);
    f("nesterov", o.nesterov);
    f("maximize", o.maximize);
  }
  static void check(const Options& o);
  static StateKeys state_keys(const Options& o);
  template <class T>
  static void init_state(typename OptimizerState<T>::Param& state, const Tensor<T>& value,
                         const Options& o);
  template <class T>
  static void update(Tensor<T>& value, const Tensor<T>& grad,
                     typename OptimizerState<T>::Param& state, const Options& o);
};

extern template class BasicOptimizer<float, SGDRule>;
extern template class BasicOptimizer<double, SGDRule>;

// SGD(params, {.lr = 0.1, .momentum = 0.9}) or SGD(std::vector<SGD<T>::Group>{...}).
template <class T>
class SGD final : public BasicOptimizer<T, SGDRule> {
 public:
  using BasicOptimizer<T, SGDRule>::BasicOptimizer;
};

}  // namespace distop::optim
