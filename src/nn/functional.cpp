#include "distop/nn/functional.hpp"

#include "common.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/kernels/gemm.hpp"

namespace distop::nn {

using kernels::Op;

template <class T>
Var<T> matmul_nt(Tape& tape, const Var<T>& x, const Var<T>& w, const TensorSpace& out_space) {
  auto y_value = DistTensor<T>::uninitialized(out_space);
  kernels::gemm(Op::N, Op::T, T(1), x.value().local(), w.value().local(), T(0), y_value.local());
  Var<T> y(std::move(y_value), x.requires_grad() || w.requires_grad());
  if (y.requires_grad()) {
    tape.record("matmul_nt", [x, w, y]() mutable {
      if (!y.has_grad()) return;
      const auto& dy = y.grad().local();
      if (w.requires_grad()) {
        auto dw = DistTensor<T>::uninitialized(w.space());
        kernels::gemm(Op::T, Op::N, T(1), dy, x.value().local(), T(0), dw.local());
        w.accumulate_grad(std::move(dw));
      }
      if (x.requires_grad()) {
        auto dx = DistTensor<T>::uninitialized(x.space());
        kernels::gemm(Op::N, Op::N, T(1), dy, w.value().local(), T(0), dx.local());
        x.accumulate_grad(std::move(dx));
      }
    });
  }
  return y;
}

template <class T>
Var<T> add_bias(Tape& tape, const Var<T>& x, const Var<T>& b) {
  auto y_value = x.value().clone();
  if (y_value.local_numel() > 0) kernels::add_row_vector(y_value.local(), b.value().local());
  Var<T> y(std::move(y_value), x.requires_grad() || b.requires_grad());
  if (y.requires_grad()) {
    tape.record("add_bias", [x, b, y]() mutable {
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
    tape.record("reinterpret", [x, y]() mutable {
      if (!y.has_grad()) return;
      pass_grad(y, x);
    });
  }
  return y;
}

#define DISTOP_INSTANTIATE(T)                                                         \
  template Var<T> matmul_nt(Tape&, const Var<T>&, const Var<T>&, const TensorSpace&); \
  template Var<T> add_bias(Tape&, const Var<T>&, const Var<T>&);                      \
  template Var<T> reinterpret(Tape&, const Var<T>&, const TensorSpace&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
