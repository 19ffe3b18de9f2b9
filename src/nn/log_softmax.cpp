#include "distop/nn/log_softmax.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/softmax.hpp"
#include "spaces.hpp"

namespace distop::nn {

template <class T>
Var<T> log_softmax(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 1 && !detail::split(xs, xs.rank() - 1), "log_softmax",
               "expected an input [..., classes] with the last axis unsplit, found ", xs.str());
  // The box as rows [rows, classes] for the kernels (classes > 0 wherever the box has entries).
  const Shape rows = detail::row_shape(xs.local_shape());
  return make_function<T>(tape, "log_softmax", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(xs);
    if (rows.numel() > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::log_softmax(x.value().local().reshaped(rows), y2);
    }
    const Tensor<T> saved = y.local().reshaped(rows);  // the output, shared with the result
    return Computed{std::move(y), [saved, rows](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (rows.numel() == 0) return;
                        Tensor<T> g2 = g.reshaped(rows);
                        kernels::log_softmax_backward(saved, dy.local().reshaped(rows), beta, g2);
                      });
                    }};
  });
}

template Var<float> log_softmax(Tape&, const Var<float>&);
template Var<double> log_softmax(Tape&, const Var<double>&);

}  // namespace distop::nn
