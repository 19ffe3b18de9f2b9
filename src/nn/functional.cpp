#include "distop/nn/functional.hpp"

#include "common.hpp"
#include "distop/kernels/elementwise.hpp"

namespace distop::nn {

template <class T>
Var<T> add_bias(Tape& tape, const Var<T>& x, const Var<T>& b) {
  return make_function<T>(tape, "add_bias", {x, b}, [&] {
    auto y = x.value().clone();
    if (y.local_numel() > 0) kernels::add_row_vector(y.local(), b.value().local());
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      if (grads.required(1)) {
                        auto db = DistTensor<T>::uninitialized(grads.input(1).space());
                        if (db.local_numel() > 0) kernels::sum_rows(dy.local(), T(0), db.local());
                        grads.add(1, std::move(db));
                      }
                      grads.add_output_grad(0);  // x's gradient is y's
                    }};
  });
}

template <class T>
Var<T> reinterpret(Tape& tape, const Var<T>& x, const TensorSpace& space) {
  return make_function<T>(tape, "reinterpret", {x}, [&] {
    return Computed{x.value().reinterpreted(space),
                    [](const DistTensor<T>&, Gradients<T>& grads) { grads.add_output_grad(0); }};
  });
}

#define DISTOP_INSTANTIATE(T)                                    \
  template Var<T> add_bias(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> reinterpret(Tape&, const Var<T>&, const TensorSpace&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
