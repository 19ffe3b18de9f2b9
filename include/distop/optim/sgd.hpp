#pragma once
// Stochastic gradient descent with PyTorch's definitions of momentum, dampening, weight decay and
// Nesterov momentum.

#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/core/tensor.hpp"

namespace distop::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD, step for step. For each parameter p with a gradient:
//   g = grad + weight_decay p
//   if momentum != 0:  buf = g on the parameter's first step, else momentum buf + (1 - dampening) g
//                      g = g + momentum buf if nesterov, else buf
//   p -= lr g
// Parameters without a gradient are skipped (their momentum buffers are kept). Local: each rank
// updates its own components; making replicated copies agree (averaging gradients in data-parallel
// training) is the caller's explicit step. Options are checked as PyTorch does (non-negative lr,
// momentum and weight decay; Nesterov needs momentum > 0 and no dampening).
template <class T>
class SGD {
 public:
  SGD(std::vector<Var<T>> parameters, SGDOptions options);

  void step();
  // Forgets every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  const SGDOptions& options() const noexcept { return options_; }
  // For learning-rate schedules.
  void set_lr(double lr);
  const std::vector<Var<T>>& parameters() const noexcept { return params_; }

 private:
  struct State {
    Tensor<T> momentum_buffer;
    bool has_buffer = false;
  };
  std::vector<Var<T>> params_;
  std::vector<State> state_;
  SGDOptions options_;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace distop::optim
