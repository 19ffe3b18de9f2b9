#include "distop/nn/log_softmax.hpp"

#include <utility>

#include "common.hpp"
#include "distop/kernels/softmax.hpp"

namespace distop::nn {

template <class T>
Var<T> log_softmax(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  const int last = xs.rank() - 1;
  DISTOP_CHECK(xs.rank() >= 1 && xs.decomposition().parts(last) == 1, "log_softmax",
               "expected an input [..., classes] with the last axis unsplit, found ", xs.str());
  // The box as rows [rows, classes] for the kernels (classes > 0 wherever the box has entries).
  const Shape& box = xs.local_shape();
  const std::int64_t classes = box[last];
  const Shape rows{classes == 0 ? 0 : box.numel() / classes, classes};
  auto y_value = DistTensor<T>::uninitialized(xs);
  if (box.numel() > 0) {
    Tensor<T> y2 = y_value.local().reshaped(rows);
    kernels::log_softmax(x.value().local().reshaped(rows), y2);
  }
  Var<T> y(std::move(y_value), x.requires_grad());
  if (!x.requires_grad()) return y;
  tape.record("log_softmax", [xin = x, y, rows]() {
    if (!y.has_grad()) return;
    if (rows.numel() == 0) {
      xin.grad();
      return;
    }
    accumulate_grad(xin, [&](T beta, Tensor<T>& dx) {
      Tensor<T> dx2 = dx.reshaped(rows);
      kernels::log_softmax_backward(y.value().local().reshaped(rows),
                                    y.grad().local().reshaped(rows), beta, dx2);
    });
  });
  return y;
}

template Var<float> log_softmax(Tape&, const Var<float>&);
template Var<double> log_softmax(Tape&, const Var<double>&);

}  // namespace distop::nn
