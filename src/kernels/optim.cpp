#include "distop/kernels/optim.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>

#include "distop/core/error.hpp"
#include "kokkos_math.hpp"

namespace distop::kernels {

namespace {

// torch's lerp (ATen/native/Lerp.h), with `small` = |w| < 0.5 decided once on the host.
template <class T>
KOKKOS_INLINE_FUNCTION T lerp(T a, T b, T w, T one_minus_w, bool small) {
  return small ? a + w * (b - a) : b - (b - a) * one_minus_w;
}

// torch.maximum: NaN if either is NaN.
template <class T>
KOKKOS_INLINE_FUNCTION T maximum(T a, T b) {
  if (a != a || b != b) return a + b;
  return a > b ? a : b;
}

template <class T>
void check_count(const Tensor<T>& param, const Tensor<T>& t, const char* op, const char* what) {
  DISTOP_CHECK(t.numel() == param.numel(), op, "the ", what, " has shape ", t.shape().str(),
               ", expected as many entries as the parameter's ", param.shape().str());
}

// A weight w of lerp, as T, with what the kernel needs to apply it.
template <class T>
struct LerpWeight {
  explicit LerpWeight(double weight)
      : w(static_cast<T>(weight)), one_minus_w(T(1) - w), small(std::abs(w) < T(0.5)) {}
  T w;
  T one_minus_w;
  bool small;
};

}  // namespace

template <class T>
void sgd_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& momentum_buffer,
              const SgdStep& s) {
  constexpr const char* op = "sgd_step";
  check_count(param, grad, op, "gradient");
  const bool with_momentum = s.momentum != 0;
  if (with_momentum) check_count(param, momentum_buffer, op, "momentum buffer");
  const bool decay = s.weight_decay != 0;
  const bool first = s.first;
  const bool nesterov = s.nesterov;
  const bool maximize = s.maximize;
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T momentum = static_cast<T>(s.momentum);
  const T one_minus_dampening = static_cast<T>(1 - s.dampening);
  const T neg_lr = static_cast<T>(-s.lr);
  auto pv = param.view();
  auto gv = grad.view();
  auto bv = momentum_buffer.view();
  Kokkos::parallel_for(
      "distop::sgd_step", Kokkos::RangePolicy<ExecSpace>(0, param.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const T p = pv(i);
        T g = maximize ? -gv(i) : gv(i);
        if (decay) g = g + weight_decay * p;
        if (with_momentum) {
          const T b = first ? g : bv(i) * momentum + one_minus_dampening * g;
          bv(i) = b;
          g = nesterov ? g + momentum * b : b;
        }
        pv(i) = p + neg_lr * g;
      });
}

template <class T>
void adam_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& exp_avg, Tensor<T>& exp_avg_sq,
               Tensor<T>& max_exp_avg_sq, const AdamStep& s) {
  constexpr const char* op = "adam_step";
  check_count(param, grad, op, "gradient");
  check_count(param, exp_avg, op, "exp_avg");
  check_count(param, exp_avg_sq, op, "exp_avg_sq");
  const bool amsgrad = s.amsgrad;
  if (amsgrad) check_count(param, max_exp_avg_sq, op, "max_exp_avg_sq");
  DISTOP_CHECK(s.step >= 1, op, "the step count must be at least 1, found ", s.step);
  const double bias_correction1 = 1 - std::pow(s.beta1, s.step);
  const double bias_correction2 = 1 - std::pow(s.beta2, s.step);
  const bool maximize = s.maximize;
  const bool coupled_decay = s.weight_decay != 0 && !s.decoupled;
  const bool decoupled_decay = s.weight_decay != 0 && s.decoupled;
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T decay_factor = static_cast<T>(1 - s.lr * s.weight_decay);
  const LerpWeight<T> w1(1 - s.beta1);
  const T beta2 = static_cast<T>(s.beta2);
  const T one_minus_beta2 = static_cast<T>(1 - s.beta2);
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T eps = static_cast<T>(s.eps);
  const T neg_step_size = static_cast<T>(-(s.lr / bias_correction1));
  auto pv = param.view();
  auto gv = grad.view();
  auto mv = exp_avg.view();
  auto vv = exp_avg_sq.view();
  auto xv = max_exp_avg_sq.view();
  Kokkos::parallel_for(
      "distop::adam_step", Kokkos::RangePolicy<ExecSpace>(0, param.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        T p = pv(i);
        T g = maximize ? -gv(i) : gv(i);
        if (coupled_decay) g = g + weight_decay * p;
        if (decoupled_decay) p = p * decay_factor;
        const T m = lerp(mv(i), g, w1.w, w1.one_minus_w, w1.small);
        mv(i) = m;
        T v = vv(i) * beta2 + one_minus_beta2 * g * g;
        vv(i) = v;
        if (amsgrad) {
          v = maximum(xv(i), v);
          xv(i) = v;
        }
        const T denom = kmath::sqrt(v) / bias_correction2_sqrt + eps;
        pv(i) = p + neg_step_size * m / denom;
      });
}

template <class T>
void rmsprop_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& square_avg,
                  Tensor<T>& grad_avg, Tensor<T>& momentum_buffer, const RmspropStep& s) {
  constexpr const char* op = "rmsprop_step";
  check_count(param, grad, op, "gradient");
  check_count(param, square_avg, op, "square_avg");
  const bool centered = s.centered;
  const bool with_momentum = s.momentum > 0;
  if (centered) check_count(param, grad_avg, op, "grad_avg");
  if (with_momentum) check_count(param, momentum_buffer, op, "momentum buffer");
  const bool maximize = s.maximize;
  const bool decay = s.weight_decay != 0;
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T alpha = static_cast<T>(s.alpha);
  const T one_minus_alpha = static_cast<T>(1 - s.alpha);
  const LerpWeight<T> w(1 - s.alpha);
  const T eps = static_cast<T>(s.eps);
  const T momentum = static_cast<T>(s.momentum);
  const T neg_lr = static_cast<T>(-s.lr);
  auto pv = param.view();
  auto gv = grad.view();
  auto sv = square_avg.view();
  auto av = grad_avg.view();
  auto bv = momentum_buffer.view();
  Kokkos::parallel_for(
      "distop::rmsprop_step", Kokkos::RangePolicy<ExecSpace>(0, param.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const T p = pv(i);
        T g = maximize ? -gv(i) : gv(i);
        if (decay) g = g + weight_decay * p;
        const T v = sv(i) * alpha + one_minus_alpha * g * g;
        sv(i) = v;
        T d;
        if (centered) {
          const T a = lerp(av(i), g, w.w, w.one_minus_w, w.small);
          av(i) = a;
          d = kmath::sqrt(v - a * a) + eps;
        } else {
          d = kmath::sqrt(v) + eps;
        }
        if (with_momentum) {
          const T b = bv(i) * momentum + g / d;
          bv(i) = b;
          pv(i) = p + neg_lr * b;
        } else {
          pv(i) = p + neg_lr * g / d;
        }
      });
}

template <class T>
void adagrad_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& sum, const AdagradStep& s) {
  constexpr const char* op = "adagrad_step";
  check_count(param, grad, op, "gradient");
  check_count(param, sum, op, "sum");
  DISTOP_CHECK(s.step >= 1, op, "the step count must be at least 1, found ", s.step);
  const bool maximize = s.maximize;
  const bool decay = s.weight_decay != 0;
  const T weight_decay = static_cast<T>(s.weight_decay);
  const T eps = static_cast<T>(s.eps);
  const T neg_clr = static_cast<T>(-(s.lr / (1 + (s.step - 1) * s.lr_decay)));
  auto pv = param.view();
  auto gv = grad.view();
  auto sv = sum.view();
  Kokkos::parallel_for(
      "distop::adagrad_step", Kokkos::RangePolicy<ExecSpace>(0, param.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const T p = pv(i);
        T g = maximize ? -gv(i) : gv(i);
        if (decay) g = g + weight_decay * p;
        const T total = sv(i) + g * g;
        sv(i) = total;
        pv(i) = p + neg_clr * g / (kmath::sqrt(total) + eps);
      });
}

#define DISTOP_INSTANTIATE(T)                                                                  \
  template void sgd_step(Tensor<T>&, const Tensor<T>&, Tensor<T>&, const SgdStep&);            \
  template void adam_step(Tensor<T>&, const Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&,    \
                          const AdamStep&);                                                    \
  template void rmsprop_step(Tensor<T>&, const Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&, \
                             const RmspropStep&);                                              \
  template void adagrad_step(Tensor<T>&, const Tensor<T>&, Tensor<T>&, const AdagradStep&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
