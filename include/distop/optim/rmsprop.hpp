#pragma once
// RMSprop: torch.optim.RMSprop, with centering, momentum, weight decay and maximize.

#include "distop/optim/basic_optimizer.hpp"

namespace distop::optim {

// torch.optim.RMSprop's options and defaults.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// torch's _single_tensor_rmsprop, for each parameter p with a gradient:
//   g = maximize ? -grad : grad
//   if weight_decay != 0:  g = g + weight_decay p
//   v = alpha v + (1 - alpha) g^2
//   if centered:           a = alpha a + (1 - alpha) g   (torch's lerp(a, g, 1 - alpha))
//                          d = sqrt(v - a^2) + eps
//   else                   d = sqrt(v) + eps
//   if momentum > 0:       buf = momentum buf + g / d,  p = p - lr buf
//   else                   p = p - lr g / d
// No bias correction; eps outside the square root. State: "square_avg" (v), "grad_avg" (a, when
// centered), "momentum_buffer" (when momentum > 0), all zero before the first step, and the
// scalar "step". Options are checked as torch checks them, and finite: lr, alpha, eps,
// weight_decay, momentum >= 0; alpha of 1 or more and momentum above 1, which torch accepts, are
// warned of (optim::warn_once).
struct RMSpropRule {
  using Options = RMSpropOptions;
  static constexpr const char* kName = "RMSprop";
  static constexpr bool kEagerState = false;
  template <class O, class F>
  static void visit(O& o, F&& f) {
    f("lr", o.lr);
    f("alpha", o.alpha);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("momentum", o.momentum);
    f("centered", o.centered);
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

extern template class BasicOptimizer<float, RMSpropRule>;
extern template class BasicOptimizer<double, RMSpropRule>;

// RMSprop(params, {.lr = 1e-2, .centered = true}) or RMSprop(std::vector<RMSprop<T>::Group>{...}).
template <class T>
class RMSprop final : public BasicOptimizer<T, RMSpropRule> {
 public:
  using BasicOptimizer<T, RMSpropRule>::BasicOptimizer;
};

}  // namespace distop::optim
