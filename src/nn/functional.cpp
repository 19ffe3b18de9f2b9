#include "distop/nn/functional.hpp"

#include "common.hpp"
#include "distop/kernels/elementwise.hpp"

namespace distop::nn {

template <class T>
Var<T> add_bias(Tape& tape, const Var<T>& x, const Var<T>& b) {
  auto y_value = x.value().clone();
  if (y_value.local_numel() > 0) kernels::add_row_vector(y_value.local(), b.value().local());
  Var<T> y(std::move(y_value), x.requires_grad() || b.requires_grad());
  if (y.requires_grad()) {
    tape.record("add_bias", [x, b, y, uses = uses_of<T>(x, b)]() mutable {
      if (!y.has_grad()) return;
      if (b.requires_grad()) {
        auto db = DistTensor<T>::uninitialized(b.space());
        if (db.local_numel() > 0) kernels::sum_rows(y.grad().local(), T(0), db.local());
        b.accumulate_grad(std::move(db));
      }
      if (x.requires_grad()) pass_grad(y, x);
    });
  }
  return y;
}

template <class T>
Var<T> reinterpret(Tape& tape, const Var<T>& x, const TensorSpace& space) {
  Var<T> y(x.value().reinterpreted(space), x.requires_grad());
  if (y.requires_grad()) {
    tape.record("reinterpret", [x, y, use = x.use()]() mutable {
      if (!y.has_grad()) return;
      pass_grad(y, x);
    });
  }
  return y;
}

#define DISTOP_INSTANTIATE(T)                                    \
  template Var<T> add_bias(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> reinterpret(Tape&, const Var<T>&, const TensorSpace&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
