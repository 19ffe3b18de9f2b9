#include "distop/nn/pointwise.hpp"

#include <limits>

#include "distop/kernels/elementwise.hpp"
#include "unary.hpp"

namespace distop::nn {

namespace {

// A bound in T: saturated to T's infinities beyond its range, the other infinity where absent.
template <class T>
T bound(std::optional<double> v, bool upper) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  if (!v) return upper ? inf : -inf;
  if (*v > static_cast<double>(std::numeric_limits<T>::max())) return inf;
  if (*v < static_cast<double>(std::numeric_limits<T>::lowest())) return -inf;
  return static_cast<T>(*v);
}

}  // namespace

using detail::Saved;

template <class T>
Var<T> exp(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "exp", Saved::output, kernels::exp<T>, kernels::exp_backward<T>);
}
template <class T>
Var<T> log(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "log", Saved::input, kernels::log<T>, kernels::log_backward<T>);
}
template <class T>
Var<T> sqrt(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "sqrt", Saved::output, kernels::sqrt<T>, kernels::sqrt_backward<T>);
}
template <class T>
Var<T> rsqrt(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "rsqrt", Saved::output, kernels::rsqrt<T>,
                       kernels::rsqrt_backward<T>);
}
template <class T>
Var<T> logsigmoid(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "logsigmoid", Saved::input, kernels::logsigmoid<T>,
                       kernels::logsigmoid_backward<T>);
}

template <class T>
Var<T> clamp(Tape& tape, const Var<T>& x, std::optional<double> min, std::optional<double> max) {
  DISTOP_CHECK(min || max, "clamp", "at least one of min and max must be given");
  const T lo = bound<T>(min, false);
  const T hi = bound<T>(max, true);
  return detail::unary(
      tape, x, "clamp", Saved::input,
      [lo, hi](const Tensor<T>& in, Tensor<T>& y) { kernels::clamp(in, lo, hi, y); },
      [lo, hi](const Tensor<T>& in, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
        kernels::clamp_backward(in, lo, hi, dy, beta, dx);
      });
}

#define DISTOP_INSTANTIATE(T)                                                                \
  template Var<T> exp(Tape&, const Var<T>&);                                                 \
  template Var<T> log(Tape&, const Var<T>&);                                                 \
  template Var<T> sqrt(Tape&, const Var<T>&);                                                \
  template Var<T> rsqrt(Tape&, const Var<T>&);                                               \
  template Var<T> clamp(Tape&, const Var<T>&, std::optional<double>, std::optional<double>); \
  template Var<T> logsigmoid(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
