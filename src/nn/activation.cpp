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

#define DISTOP_INSTANTIATE(T)                    \
  template Var<T> relu(Tape&, const Var<T>&);    \
  template Var<T> sigmoid(Tape&, const Var<T>&); \
  template Var<T> tanh(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
