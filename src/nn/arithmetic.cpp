#include "distop/nn/arithmetic.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/arithmetic.hpp"
#include "distop/kernels/reduce.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

enum class Kind { Add, Sub, Mul };

const char* name_of(Kind k) { return k == Kind::Add ? "add" : k == Kind::Sub ? "sub" : "mul"; }

// Whether b is a row operand of a (true) or in a's space (false); an Error otherwise.
bool broadcasts(const TensorSpace& as, const TensorSpace& bs, const char* op) {
  if (as == bs) return false;
  const Shape& ga = as.global_shape();
  const Shape& gb = bs.global_shape();
  // b is [1, d1, ..., dk] (lead 1) or [d1, ..., dk] (lead 0) for a [N, d1, ..., dk].
  const int lead = gb.rank() - (ga.rank() - 1);
  bool fits = ga.rank() >= 1 && (lead == 0 || (lead == 1 && gb[0] == 1));
  for (int d = 1; fits && d < ga.rank(); ++d) fits = gb[d - 1 + lead] == ga[d];
  DISTOP_CHECK(fits, op,
               "the second operand must be in the first's space, or of its shape without "
               "the first axis ([d1, ..., dk] or [1, d1, ..., dk]) to broadcast over its rows; "
               "found ",
               as.str(), " and ", bs.str());
  DISTOP_CHECK(as.partition().same_as(bs.partition()), op,
               "a broadcast operand must live on the first operand's partition; found ", as.str(),
               " and ", bs.str());
  for (int d = 1; d < ga.rank(); ++d)
    DISTOP_CHECK(detail::same_blocks(as, d, bs, d - 1 + lead), op, "axis ", d - 1 + lead,
                 " of the broadcast operand must be split as axis ", d,
                 " of the first (the same blocks over the same grid axis); found ", as.str(),
                 " and ", bs.str());
  return true;
}

template <class T>
Var<T> binary(Tape& tape, const Var<T>& a, const Var<T>& b, Kind kind) {
  const char* op = name_of(kind);
  const bool broadcast = broadcasts(a.space(), b.space(), op);
  const Tensor<T>& av = a.value().local();
  const Tensor<T>& bv = b.value().local();
  auto y = DistTensor<T>::uninitialized(a.space());
  if (av.numel() > 0) {
    if (kind == Kind::Mul)
      kernels::mul(T(1), av, bv, T(0), y.local());
    else
      kernels::add(av, kind == Kind::Sub ? T(-1) : T(1), bv, y.local());
  }
  // The rows of a's box against its row operand, for the broadcast gradient.
  const std::int64_t n = bv.numel();
  const Shape rows{n == 0 ? 0 : av.numel() / n, n};
  return make_function<T>(tape, op, {a, b}, std::move(y),
                          [kind, broadcast, rows](const DistTensor<T>& dy, Gradients<T>& grads) {
                            const Tensor<T>& d = dy.local();
                            const Tensor<T>& a_value = grads.input(0).value().local();
                            const Tensor<T>& b_value = grads.input(1).value().local();
                            // b's gradient first: a's may take dy's storage.
                            grads.accumulate(1, [&](T beta, Tensor<T>& g) {
                              const T sign = kind == Kind::Sub ? T(-1) : T(1);
                              const Tensor<T>* weight = kind == Kind::Mul ? &a_value : nullptr;
                              if (broadcast)
                                kernels::sum_axes(d.reshaped(rows), {0}, sign, beta, g, weight);
                              else if (kind == Kind::Mul)
                                kernels::mul(T(1), d, a_value, beta, g);
                              else
                                kernels::scaled_add(sign, d, beta, g);
                            });
                            if (kind == Kind::Mul) {
                              grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                                if (d.numel() > 0) kernels::mul(T(1), d, b_value, beta, g);
                              });
                            } else {
                              grads.add_output_grad(0);
                            }
                          });
}

}  // namespace

template <class T>
Var<T> add(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Add);
}
template <class T>
Var<T> sub(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Sub);
}
template <class T>
Var<T> mul(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Mul);
}

template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, double factor) {
  const T f = static_cast<T>(factor);
  auto y = DistTensor<T>::uninitialized(x.space());
  kernels::scaled_add(f, x.value().local(), T(0), y.local());
  return make_function<T>(
      tape, "scale", {x}, std::move(y), [f](const DistTensor<T>& dy, Gradients<T>& grads) {
        grads.accumulate(
            0, [&](T beta, Tensor<T>& g) { kernels::scaled_add(f, dy.local(), beta, g); });
      });
}

template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, const Var<T>& s) {
  const TensorSpace& ss = s.space();
  DISTOP_CHECK(ss.global_shape() == Shape{1} && ss.partition().same_as(x.space().partition()),
               "scale", "expected a scalar factor of shape [1] on the partition of ",
               x.space().str(), ", found ", ss.str());
  const Tensor<T>& xin = x.value().local();
  auto y = DistTensor<T>::uninitialized(x.space());
  if (xin.numel() > 0) kernels::mul(T(1), xin, s.value().local(), T(0), y.local());
  return make_function<T>(
      tape, "scale", {x, s}, std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
        const Tensor<T>& d = dy.local();
        const Tensor<T>& x_value = grads.input(0).value().local();
        const Tensor<T>& s_value = grads.input(1).value().local();
        grads.accumulate(1, [&](T beta, Tensor<T>& g) {
          if (g.numel() > 0)
            kernels::sum_axes(d.reshaped(Shape{d.numel()}), {0}, T(1), beta, g, &x_value);
        });
        grads.accumulate(0, [&](T beta, Tensor<T>& g) {
          if (d.numel() > 0) kernels::mul(T(1), d, s_value, beta, g);
        });
      });
}

#define DISTOP_INSTANTIATE(T)                               \
  template Var<T> add(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> sub(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> mul(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> scale(Tape&, const Var<T>&, double);      \
  template Var<T> scale(Tape&, const Var<T>&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
