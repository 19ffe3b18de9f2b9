#include "distop/nn/activation.hpp"

#include "distop/kernels/elementwise.hpp"
#include "unary.hpp"

namespace distop::nn {

using detail::Saved;

template <class T>
Var<T> relu(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "relu", Saved::input, kernels::relu<T>, kernels::relu_backward<T>);
}
template <class T>
Var<T> sigmoid(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "sigmoid", Saved::output, kernels::sigmoid<T>,
                       kernels::sigmoid_backward<T>);
}
template <class T>
Var<T> tanh(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "tanh", Saved::output, kernels::tanh<T>, kernels::tanh_backward<T>);
}

template <class T>
Var<T> gelu(Tape& tape, const Var<T>& x, GeluApproximate approximate) {
  if (approximate == GeluApproximate::tanh)
    return detail::unary(tape, x, "gelu", Saved::input, kernels::gelu_tanh<T>,
                         kernels::gelu_tanh_backward<T>);
  return detail::unary(tape, x, "gelu", Saved::input, kernels::gelu<T>, kernels::gelu_backward<T>);
}
template <class T>
Var<T> silu(Tape& tape, const Var<T>& x) {
  return detail::unary(tape, x, "silu", Saved::input, kernels::silu<T>, kernels::silu_backward<T>);
}

#define DISTOP_INSTANTIATE(T)                                  \
  template Var<T> relu(Tape&, const Var<T>&);                  \
  template Var<T> sigmoid(Tape&, const Var<T>&);               \
  template Var<T> tanh(Tape&, const Var<T>&);                  \
  template Var<T> gelu(Tape&, const Var<T>&, GeluApproximate); \
  template Var<T> silu(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
