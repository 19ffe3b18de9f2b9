#include "distop/nn/pointwise.hpp"

#include <limits>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/pointwise.hpp"

namespace distop::nn {

namespace {

template <class T>
using Forward = void (*)(const Tensor<T>&, Tensor<T>&);
template <class T>
using Backward = void (*)(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);

// y = f(x), with dx = beta dx + backward(saved, dy) from the saved input (save_output false) or
// output (true).
template <class T>
Var<T> pointwise(Tape& tape, const Var<T>& x, const char* name, Forward<T> forward,
                 Backward<T> backward, bool save_output) {
  auto y = DistTensor<T>::uninitialized(x.space());
  forward(x.value().local(), y.local());
  // The output's storage, shared (not copied) with the result, when the backward pass reads it.
  Tensor<T> saved_output = save_output ? y.local() : Tensor<T>();
  return make_function<T>(
      tape, name, {x}, std::move(y),
      [backward, save_output, saved_output](const DistTensor<T>& dy, Gradients<T>& grads) {
        const Tensor<T>& saved = save_output ? saved_output : grads.input(0).value().local();
        grads.accumulate(0, [&](T beta, Tensor<T>& g) { backward(saved, dy.local(), beta, g); });
      });
}

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

template <class T>
Var<T> exp(Tape& tape, const Var<T>& x) {
  return pointwise<T>(tape, x, "exp", kernels::exp<T>, kernels::exp_backward<T>, true);
}
template <class T>
Var<T> log(Tape& tape, const Var<T>& x) {
  return pointwise<T>(tape, x, "log", kernels::log<T>, kernels::log_backward<T>, false);
}
template <class T>
Var<T> sqrt(Tape& tape, const Var<T>& x) {
  return pointwise<T>(tape, x, "sqrt", kernels::sqrt<T>, kernels::sqrt_backward<T>, true);
}
template <class T>
Var<T> logsigmoid(Tape& tape, const Var<T>& x) {
  return pointwise<T>(tape, x, "logsigmoid", kernels::logsigmoid<T>,
                      kernels::logsigmoid_backward<T>, false);
}

template <class T>
Var<T> clamp(Tape& tape, const Var<T>& x, std::optional<double> min, std::optional<double> max) {
  DISTOP_CHECK(min || max, "clamp", "at least one of min and max must be given");
  const T lo = bound<T>(min, false);
  const T hi = bound<T>(max, true);
  auto y = DistTensor<T>::uninitialized(x.space());
  kernels::clamp(x.value().local(), lo, hi, y.local());
  return make_function<T>(
      tape, "clamp", {x}, std::move(y), [lo, hi](const DistTensor<T>& dy, Gradients<T>& grads) {
        grads.accumulate(0, [&](T beta, Tensor<T>& g) {
          kernels::clamp_backward(grads.input(0).value().local(), lo, hi, dy.local(), beta, g);
        });
      });
}

#define DISTOP_INSTANTIATE(T)                                                                \
  template Var<T> exp(Tape&, const Var<T>&);                                                 \
  template Var<T> log(Tape&, const Var<T>&);                                                 \
  template Var<T> sqrt(Tape&, const Var<T>&);                                                \
  template Var<T> clamp(Tape&, const Var<T>&, std::optional<double>, std::optional<double>); \
  template Var<T> logsigmoid(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
