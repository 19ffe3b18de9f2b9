#pragma once
// AdamW: torch.optim.AdamW, Adam with decoupled weight decay.

#include <array>

#include "distop/optim/basic_optimizer.hpp"

namespace distop::optim {

// torch.optim.AdamW's options and defaults (Adam's, but weight decay 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// torch's _single_tensor_adam with decoupled weight decay: Adam (adam.hpp) in which, instead of
// adding weight_decay p to the gradient, the parameter is first scaled,
//   p = (1 - lr weight_decay) p,
// before the moments are updated and the Adam step is taken from the scaled p. State and option
// names and checks as Adam's.
struct AdamWRule {
  using Options = AdamWOptions;
  static constexpr const char* kName = "AdamW";
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

extern template class BasicOptimizer<float, AdamWRule>;
extern template class BasicOptimizer<double, AdamWRule>;

// AdamW(params, {.lr = 1e-3, .weight_decay = 0.01}) or AdamW(std::vector<AdamW<T>::Group>{...}).
template <class T>
class AdamW final : public BasicOptimizer<T, AdamWRule> {
 public:
  using BasicOptimizer<T, AdamWRule>::BasicOptimizer;
};

}  // namespace distop::optim
