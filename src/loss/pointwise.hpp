#pragma once
// Internal: the losses that are a sum of per-entry terms l(x_i, t_i) of an input x and a target t
// in x's space (L1, MSE, PoissonNLL, BCE, BCEWithLogits, KLDiv), reduced by torch's reductions
// under DistDL's rule (loss/reduction.hpp): each rank sums its own box's terms, and the
// normalisation divides by a count read from the global shape, so that the forward and backward
// passes send no message.
//
// A term is a functor, copyable into a Kokkos kernel, with
//   KOKKOS_INLINE_FUNCTION T value(std::int64_t i, T x, T t) const;  // l(x, t)
//   KOKKOS_INLINE_FUNCTION T grad(std::int64_t i, T x, T t) const;   // dl/dx
// where i is the entry's flat index in this rank's box (for a term whose weights depend on the
// entry's position: BCEWithLogits' pos_weight).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/core/error.hpp"
#include "distop/loss/reduction.hpp"
#include "scalar.hpp"

namespace distop::loss::detail {

// y_i = l(x_i, t_i).
template <class T, class Term>
void term_values(const Term& term, const Tensor<T>& x, const Tensor<T>& t, Tensor<T>& y) {
  auto xv = x.view();
  auto tv = t.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::loss::term_values", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) = term.value(i, xv(i), tv(i)); });
}

// The sum of l(x_i, t_i) over the box, accumulated in double.
template <class T, class Term>
double term_sum(const Term& term, const Tensor<T>& x, const Tensor<T>& t) {
  auto xv = x.view();
  auto tv = t.view();
  double sum = 0;
  Kokkos::parallel_reduce(
      "distop::loss::term_sum", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) {
        acc += static_cast<double>(term.value(i, xv(i), tv(i)));
      },
      sum);
  return sum;
}

// g_i = beta g_i + alpha dl/dx(x_i, t_i) (times dy_i where dy is given): make_function's
// accumulate convention, so g is not read with beta 0.
template <class T, class Term>
void term_grads(const Term& term, const Tensor<T>& x, const Tensor<T>& t, const Tensor<T>* dy,
                T alpha, T beta, Tensor<T>& g) {
  auto xv = x.view();
  auto tv = t.view();
  auto gv = g.view();
  const Kokkos::RangePolicy<ExecSpace> all(0, x.numel());
  const char* label = "distop::loss::term_grads";
  if (dy != nullptr) {
    auto dyv = dy->view();
    if (beta == T(0))
      Kokkos::parallel_for(
          label, all,
          KOKKOS_LAMBDA(std::int64_t i) { gv(i) = alpha * dyv(i) * term.grad(i, xv(i), tv(i)); });
    else
      Kokkos::parallel_for(
          label, all, KOKKOS_LAMBDA(std::int64_t i) {
            gv(i) = alpha * dyv(i) * term.grad(i, xv(i), tv(i)) + beta * gv(i);
          });
  } else {
    if (beta == T(0))
      Kokkos::parallel_for(
          label, all,
          KOKKOS_LAMBDA(std::int64_t i) { gv(i) = alpha * term.grad(i, xv(i), tv(i)); });
    else
      Kokkos::parallel_for(
          label, all, KOKKOS_LAMBDA(std::int64_t i) {
            gv(i) = alpha * term.grad(i, xv(i), tv(i)) + beta * gv(i);
          });
  }
}

// The checks every pointwise loss makes, from metadata only (the same Error on every rank): the
// target in the input's space, and batchmean only where the loss has it.
template <class T>
void check_pointwise(const char* op, const Var<T>& input, const DistTensor<T>& target,
                     Reduction reduction, bool has_batchmean) {
  DISTOP_CHECK(input.defined(), op, "the input is an undefined (default-constructed) Var");
  check_space(target, input.space(), op, "the target");
  DISTOP_CHECK(reduction != Reduction::batchmean || has_batchmean, op,
               "reduction 'batchmean' is kl_div's alone (as in torch); expected 'none', 'sum' or "
               "'mean'");
  DISTOP_CHECK(reduction != Reduction::batchmean || input.space().rank() >= 1, op,
               "reduction 'batchmean' divides by the batch, global shape[0]: expected an input of "
               "at least one axis, found ",
               input.space().str());
}

// What a reducing reduction divides the sum by, from the global shape.
inline double reduction_divisor(Reduction reduction, const Shape& global) {
  switch (reduction) {
    case Reduction::mean:
      return static_cast<double>(global.numel());
    case Reduction::batchmean:
      return static_cast<double>(global[0]);
    default:
      return 1.0;
  }
}

// The loss sum_i l(x_i, t_i), reduced: with Reduction::none the per-entry terms as a Var in the
// input's space, else a loss in distop's convention on the input's partition (this rank's
// component its box's sum over the divisor). Local: no messages, forward or backward. The target's
// local tensor is saved (shared, not copied) for the backward: it must not change before then.
// The caller has checked the arguments (check_pointwise and its own). `keep` is a tensor whose
// storage the term's Views refer to (BCEWithLogits' pos_weight), kept alive until the backward
// pass: a View of host storage from distop's pool does not keep the storage itself.
template <class T, class Term>
Var<T> pointwise_loss(Tape& tape, const char* op, const Var<T>& input, const DistTensor<T>& target,
                      Reduction reduction, const Term& term, Tensor<T> keep = {}) {
  const TensorSpace& s = input.space();
  const Tensor<T> t = target.local();
  if (reduction == Reduction::none) {
    return make_function<T>(tape, op, {input}, [&] {
      auto y = DistTensor<T>::uninitialized(s);
      term_values(term, input.value().local(), t, y.local());
      auto backward = [t, term, keep](const DistTensor<T>& dy, Gradients<T>& grads) {
        const Tensor<T>& x = grads.input(0).value().local();
        grads.accumulate(
            0, [&](T beta, Tensor<T>& g) { term_grads(term, x, t, &dy.local(), T(1), beta, g); });
      };
      return Computed{std::move(y), std::move(backward)};
    });
  }
  const double divisor = reduction_divisor(reduction, s.global_shape());
  return make_function<T>(tape, op, {input}, [&] {
    const double sum = term_sum(term, input.value().local(), t);
    auto backward = [t, term, keep, divisor](const DistTensor<T>& dy, Gradients<T>& grads) {
      const Tensor<T>& x = grads.input(0).value().local();
      const T alpha = static_cast<T>(scalar_grad(dy) / divisor);
      grads.accumulate(
          0, [&](T beta, Tensor<T>& g) { term_grads<T>(term, x, t, nullptr, alpha, beta, g); });
    };
    return Computed{scalar<T>(s.partition(), divisor > 0 ? sum / divisor : 0.0),
                    std::move(backward)};
  });
}

}  // namespace distop::loss::detail
