#pragma once
// The optimizers' updates: one fused kernel per parameter and step, over the parameter's,
// gradient's and state's entries, as torch.optim's single-tensor (foreach=False) code computes
// them. The step's scalars (bias corrections, decayed learning rates) are computed in double on
// the host and converted to T, as torch converts its Python-float scalars; every entry is then
// computed in T, one torch operation after another. lerp(a, b, w) is torch's:
// a + w (b - a) when |w| < 0.5, else b - (b - a)(1 - w).
//
// Each call checks that every tensor it uses has the parameter's element count; tensors a call
// does not use (a momentum buffer without momentum, ...) may be empty. The gradient is read only.

#include "distop/core/tensor.hpp"

namespace distop::kernels {

struct SgdStep {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool first = false;  // the momentum buffer is new: it starts as the (decayed) gradient
};
// g = maximize ? -grad : grad;  if weight_decay != 0: g = g + weight_decay p
// if momentum != 0: buf = first ? g : momentum buf + (1 - dampening) g
//                   g = nesterov ? g + momentum buf : buf
// p = p - lr g
template <class T>
void sgd_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& momentum_buffer,
              const SgdStep& s);

struct AdamStep {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
  bool decoupled = false;  // AdamW's weight decay
  double step = 1;         // t, this step's count (from 1)
};
// g = maximize ? -grad : grad
// if weight_decay != 0: decoupled ? p = (1 - lr weight_decay) p : g = g + weight_decay p
// m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g g
// if amsgrad: v_max = max(v_max, v), and v_max replaces v below
// p = p - (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
template <class T>
void adam_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& exp_avg, Tensor<T>& exp_avg_sq,
               Tensor<T>& max_exp_avg_sq, const AdamStep& s);

struct RmspropStep {
  double lr = 0;
  double alpha = 0;
  double eps = 0;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};
// g = maximize ? -grad : grad;  if weight_decay != 0: g = g + weight_decay p
// v = alpha v + (1 - alpha) g g
// if centered: a = lerp(a, g, 1 - alpha), d = sqrt(v - a a) + eps;  else d = sqrt(v) + eps
// if momentum > 0: buf = momentum buf + g / d, p = p - lr buf;  else p = p - lr g / d
template <class T>
void rmsprop_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& square_avg,
                  Tensor<T>& grad_avg, Tensor<T>& momentum_buffer, const RmspropStep& s);

struct AdagradStep {
  double lr = 0;
  double lr_decay = 0;
  double weight_decay = 0;
  double eps = 0;
  bool maximize = false;
  double step = 1;  // t, this step's count (from 1)
};
// g = maximize ? -grad : grad;  if weight_decay != 0: g = g + weight_decay p
// sum = sum + g g;  p = p - (lr / (1 + (t - 1) lr_decay)) g / (sqrt(sum) + eps)
template <class T>
void adagrad_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& sum, const AdagradStep& s);

}  // namespace distop::kernels
