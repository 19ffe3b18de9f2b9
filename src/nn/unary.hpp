#pragma once
// Internal to the nn layer: an elementwise function of one Var (the activations of activation.cpp,
// the math functions of pointwise.cpp), written once on make_function's forward form.

#include <utility>

#include "distop/autodiff/function.hpp"

namespace distop::nn::detail {

// What the derivative of an elementwise function is computed from.
enum class Saved { input, output };

// y = f(x) entry by entry in x's space: `forward(x, y)` overwrites y's box from x's, and
// `backward(saved, dy, beta, dx)` overwrites dx with beta dx + dy f'(.) from the saved input or
// output (the kernels of kernels/elementwise.hpp, or lambdas binding their extra arguments).
// Local (no messages).
template <class T, class Forward, class Backward>
Var<T> unary(Tape& tape, const Var<T>& x, const char* name, Saved saved, Forward forward,
             Backward backward) {
  return make_function<T>(tape, name, {x}, [&](bool recording) {
    auto y = DistTensor<T>::uninitialized(x.space());
    forward(x.value().local(), y.local());
    // The output's storage, shared (not copied) with the result, when the backward pass reads it.
    Tensor<T> output = recording && saved == Saved::output ? y.local() : Tensor<T>();
    return Computed{
        std::move(y), [saved, output = std::move(output), backward](const DistTensor<T>& dy,
                                                                    Gradients<T>& grads) {
          const Tensor<T>& s = saved == Saved::output ? output : grads.input(0).value().local();
          grads.accumulate(0, [&](T beta, Tensor<T>& g) { backward(s, dy.local(), beta, g); });
        }};
  });
}

}  // namespace distop::nn::detail
