#pragma once
// Adagrad: torch.optim.Adagrad, with learning-rate decay, weight decay, an initial accumulator
// value and maximize.

#include "distop/optim/basic_optimizer.hpp"

namespace distop::optim {

// torch.optim.Adagrad's options and defaults.
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

// torch's _single_tensor_adagrad, for each parameter p with a gradient, at its step t (from 1):
//   g = maximize ? -grad : grad
//   if weight_decay != 0:  g = g + weight_decay p
//   sum = sum + g^2
//   p = p - (lr / (1 + (t - 1) lr_decay)) g / (sqrt(sum) + eps)
// with the decayed learning rate in double. State, made for every parameter at construction (as
// torch does): "sum", filled with initial_accumulator_value, and the scalar "step" (t), 0. Options
// are checked as torch checks them, and finite: all >= 0.
struct AdagradRule {
  using Options = AdagradOptions;
  static constexpr const char* kName = "Adagrad";
  static constexpr bool kEagerState = true;
  template <class O, class F>
  static void visit(O& o, F&& f) {
    f("lr", o.lr);
    f("lr_decay", o.lr_decay);
    f("weight_decay", o.weight_decay);
    f("initial_accumulator_value", o.initial_accumulator_value);
    f("eps", o.eps);
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

extern template class BasicOptimizer<float, AdagradRule>;
extern template class BasicOptimizer<double, AdagradRule>;

// Adagrad(params, {.lr = 1e-2, .lr_decay = 1e-4}) or Adagrad(std::vector<Adagrad<T>::Group>{...}).
template <class T>
class Adagrad final : public BasicOptimizer<T, AdagradRule> {
 public:
  using BasicOptimizer<T, AdagradRule>::BasicOptimizer;
};

}  // namespace distop::optim
