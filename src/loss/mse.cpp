#include "distop/loss/mse.hpp"

#include "pointwise.hpp"

namespace distop::loss {

namespace {

// (x - t)^2; its derivative 2 (x - t).
template <class T>
struct MSETerm {
  KOKKOS_INLINE_FUNCTION T value(std::int64_t, T x, T t) const { return (x - t) * (x - t); }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t, T x, T t) const { return T(2) * (x - t); }
};

}  // namespace

template <class T>
Var<T> mse(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
           const MSEOptions& options) {
  const char* op = "mse";
  detail::check_pointwise(op, input, target, options.reduction, false);
  return detail::pointwise_loss(tape, op, input, target, options.reduction, MSETerm<T>{});
}

template Var<float> mse(Tape&, const Var<float>&, const DistTensor<float>&, const MSEOptions&);
template Var<double> mse(Tape&, const Var<double>&, const DistTensor<double>&, const MSEOptions&);

}  // namespace distop::loss
