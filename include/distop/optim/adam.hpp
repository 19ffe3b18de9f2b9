#pragma once
// Adam: torch.optim.Adam, with AMSGrad, L2 weight decay and maximize.

#include <array>

#include "distop/optim/basic_optimizer.hpp"

namespace distop::optim {

// torch.optim.Adam's options and defaults.
struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
};

// torch's _single_tensor_adam, for each parameter p with a gradient, at its step t (from 1):
//   g = maximize ? -grad : grad
//   if weight_decay != 0:  g = g + weight_decay p
//   m = beta1 m + (1 - beta1) g            (torch's lerp(m, g, 1 - beta1))
//   v = beta2 v + (1 - beta2) g^2
//   if amsgrad:            v_max = max(v_max, v), used for v below
//   p = p - (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// with the bias corrections in double. State: "exp_avg" (m), "exp_avg_sq" (v), "max_exp_avg_sq"
// (v_max, with amsgrad) and the scalar "step" (t), zero before the first step. Options (group
// keys "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize") are checked as torch
// checks them, and finite: lr, eps, weight_decay >= 0, betas in [0, 1).
struct AdamRule {
  using Options = AdamOptions;
  static constexpr const char* kName = "Adam";
  static constexpr bool kEagerState = false;
  template <class O, class F>
  static void visit(O& o, F&& f) {
    f("lr", o.lr);
    f("beta1", o.betas[0]);
    f("beta2", o.betas[1]);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("amsgrad", o.amsgrad);
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

extern template class BasicOptimizer<float, AdamRule>;
extern template class BasicOptimizer<double, AdamRule>;

// Adam(params, {.lr = 1e-3, .betas = {0.9, 0.999}}) or Adam(std::vector<Adam<T>::Group>{...}).
template <class T>
class Adam final : public BasicOptimizer<T, AdamRule> {
 public:
  using BasicOptimizer<T, AdamRule>::BasicOptimizer;
};

}  // namespace distop::optim
