#include "distop/nn/softmax.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/softmax.hpp"
#include "distop/nn/arithmetic.hpp"
#include "spaces.hpp"

namespace distop::nn {

template <class T>
Var<T> softmax(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 1 && !detail::split(xs, xs.rank() - 1), "softmax",
               "expected an input [..., classes] with the last axis unsplit, found ", xs.str());
  const Shape rows = detail::row_shape(xs.local_shape());
  return make_function<T>(tape, "softmax", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(xs);
    if (rows.numel() > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::softmax(x.value().local().reshaped(rows), y2);
    }
    const Tensor<T> saved = y.local().reshaped(rows);  // the output, shared with the result
    return Computed{std::move(y), [saved, rows](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (rows.numel() == 0) return;
                        Tensor<T> g2 = g.reshaped(rows);
                        kernels::softmax_backward(saved, dy.local().reshaped(rows), beta, g2);
                      });
                    }};
  });
}

template <class T>
Var<T> softmax(Tape& tape, const Var<T>& x, const DistTensor<T>& mask) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 1 && !detail::split(xs, xs.rank() - 1), "softmax",
               "expected an input [..., classes] with the last axis unsplit, found ", xs.str());
  return softmax(tape, add(tape, x, Var<T>(mask, false)));
}

template <class T>
Var<T> causal_softmax(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  const int r = xs.rank();
  DISTOP_CHECK(r >= 2 && !detail::split(xs, r - 1), "causal_softmax",
               "expected scores [..., S, S2] with the last axis unsplit, found ", xs.str());
  const Shape rows = detail::row_shape(xs.local_shape());
  const std::int64_t matrix_rows = xs.local_shape()[r - 2];
  const std::int64_t row_offset = xs.local_offset()[static_cast<std::size_t>(r - 2)];
  return make_function<T>(tape, "causal_softmax", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(xs);
    if (rows.numel() > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::causal_mask(x.value().local().reshaped(rows), matrix_rows, row_offset, y2);
      kernels::softmax(y2, y2);
    }
    const Tensor<T> saved = y.local().reshaped(rows);  // the output, shared with the result
    return Computed{std::move(y), [saved, rows](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (rows.numel() == 0) return;
                        Tensor<T> g2 = g.reshaped(rows);
                        kernels::softmax_backward(saved, dy.local().reshaped(rows), beta, g2);
                      });
                    }};
  });
}

template Var<float> softmax(Tape&, const Var<float>&, const DistTensor<float>&);
template Var<double> softmax(Tape&, const Var<double>&, const DistTensor<double>&);
template Var<float> causal_softmax(Tape&, const Var<float>&);
template Var<double> causal_softmax(Tape&, const Var<double>&);
template Var<float> softmax(Tape&, const Var<float>&);
template Var<double> softmax(Tape&, const Var<double>&);

}  // namespace distop::nn
