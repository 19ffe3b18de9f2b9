#include "distop/nn/normalize.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/normalize.hpp"
#include "spaces.hpp"

namespace distop::nn {

template <class T>
Var<T> normalize(Tape& tape, const Var<T>& x, double eps) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 1 && !detail::split(xs, xs.rank() - 1), "normalize",
               "expected a tensor [..., n] with the last axis unsplit, found ", xs.str());
  const Shape rows = detail::row_shape(xs.local_shape());
  return make_function<T>(tape, "normalize", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(xs);
    Tensor<double> norms = Tensor<double>::uninitialized(Shape{rows[0]});
    if (rows.numel() > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::normalize_rows(x.value().local().reshaped(rows), eps, y2, norms);
    }
    const Tensor<T> saved = y.local().reshaped(rows);  // the output, shared with the result
    return Computed{std::move(y),
                    [saved, norms, rows, eps](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (rows.numel() == 0) return;
                        Tensor<T> g2 = g.reshaped(rows);
                        kernels::normalize_rows_backward(saved, dy.local().reshaped(rows), norms,
                                                         eps, beta, g2);
                      });
                    }};
  });
}

template Var<float> normalize(Tape&, const Var<float>&, double);
template Var<double> normalize(Tape&, const Var<double>&, double);

}  // namespace distop::nn
