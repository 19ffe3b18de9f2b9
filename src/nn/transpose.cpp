#include "distop/nn/transpose.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/transpose.hpp"
#include "spaces.hpp"

namespace distop::nn {

template <class T>
Var<T> transpose(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() == 2, "transpose", "expected a 2-D tensor, found ", xs.str());
  const Decomposition& d = xs.decomposition();
  auto extents = detail::block_extents(d);
  std::swap(extents[0], extents[1]);
  const Shape& global = xs.global_shape();
  TensorSpace ys(xs.partition(),
                 Decomposition::blocks(Shape{global[1], global[0]}, d.grid(), std::move(extents),
                                       {d.axis_map()[1], d.axis_map()[0]}));
  return make_function<T>(tape, "transpose", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(ys);
    kernels::transpose(x.value().local(), T(0), y.local());
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        kernels::transpose(dy.local(), beta, g);
                      });
                    }};
  });
}

template Var<float> transpose(Tape&, const Var<float>&);
template Var<double> transpose(Tape&, const Var<double>&);

}  // namespace distop::nn
