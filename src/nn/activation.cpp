#include "distop/nn/activation.hpp"

#include <utility>

#include "distop/core/trace.hpp"
#include "distop/kernels/elementwise.hpp"

namespace distop::nn {

namespace {

template <class T>
using Forward = void (*)(const Tensor<T>&, Tensor<T>&);
template <class T>
using Backward = void (*)(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);

// y = f(x); backward computes dx from the saved input (save_output false) or output (true).
template <class T>
Var<T> activation(Tape& tape, const Var<T>& x, const char* name, Forward<T> forward,
                  Backward<T> backward, bool save_output) {
  const trace::Compute span(name);
  auto y_value = DistTensor<T>::uninitialized(x.space());
  forward(x.value().local(), y_value.local());
  Var<T> y(std::move(y_value), x.requires_grad());
  if (!x.requires_grad()) return y;
  tape.record(name, [xin = x, y, backward, save_output, use = x.use()]() mutable {
    if (!y.has_grad()) return;
    auto dx = DistTensor<T>::uninitialized(xin.space());
    const Tensor<T>& saved = save_output ? y.value().local() : xin.value().local();
    backward(saved, y.grad().local(), dx.local());
    xin.accumulate_grad(std::move(dx));
  });
  return y;
}

}  // namespace

template <class T>
Var<T> relu(Tape& tape, const Var<T>& x) {
  return activation<T>(tape, x, "relu", kernels::relu<T>, kernels::relu_backward<T>, false);
}
template <class T>
Var<T> sigmoid(Tape& tape, const Var<T>& x) {
  return activation<T>(tape, x, "sigmoid", kernels::sigmoid<T>, kernels::sigmoid_backward<T>, true);
}
template <class T>
Var<T> tanh(Tape& tape, const Var<T>& x) {
  return activation<T>(tape, x, "tanh", kernels::tanh<T>, kernels::tanh_backward<T>, true);
}

#define DISTOP_INSTANTIATE(T)                    \
  template Var<T> relu(Tape&, const Var<T>&);    \
  template Var<T> sigmoid(Tape&, const Var<T>&); \
  template Var<T> tanh(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
