#pragma once
// Stochastic gradient descent with PyTorch's definitions of momentum, dampening, weight decay and
// Nesterov momentum.

#include <optional>
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
  // Replaces every option at once (as loading PyTorch's param_groups does), checked as the
  // constructor checks them; nothing changes when they are invalid.
  void set_options(const SGDOptions& options);
  const std::vector<Var<T>>& parameters() const noexcept { return params_; }

  // The optimizer's state, for checkpoints: PyTorch's state[p]["momentum_buffer"] for each
  // parameter, in parameters() order, as a deep copy of this rank's local box of the buffer, or
  // nullopt for a parameter that has no buffer yet (no step with momentum has updated it).
  std::vector<std::optional<Tensor<T>>> momentum_buffers() const;
  // Replaces the whole state with deep copies of `buffers`: one entry per parameter, each either
  // nullopt (the parameter has no buffer, and its next step starts one from its gradient, as in
  // PyTorch) or a tensor of the local shape of the parameter's box. Throws distop::Error (op
  // "SGD::set_momentum_buffers") and changes nothing otherwise. Local, not collective.
  void set_momentum_buffers(const std::vector<std::optional<Tensor<T>>>& buffers);

 private:
  std::vector<Var<T>> params_;
  std::vector<std::optional<Tensor<T>>> momentum_;  // one per parameter; nullopt: no buffer yet
  SGDOptions options_;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace distop::optim
