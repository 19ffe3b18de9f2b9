#include "distop/loss/poisson_nll.hpp"

#include <cmath>

#include "../kernels/kokkos_math.hpp"
#include "pointwise.hpp"

namespace distop::loss {

namespace {

namespace kmath = kernels::kmath;

// torch's poisson_nll_loss term: exp(x) - t x (log_input) or x - t log(x + eps), plus with `full`
// Stirling's t log(t) - t + log(2 pi t) / 2 where t > 1.
template <class T>
struct PoissonNLLTerm {
  bool log_input;
  bool full;
  T eps;
  KOKKOS_INLINE_FUNCTION T value(std::int64_t, T x, T t) const {
    T v = log_input ? kmath::exp(x) - t * x : x - t * kmath::log(x + eps);
    if (full && t > T(1)) {
      const T two_pi = T(6.283185307179586);
      v += t * kmath::log(t) - t + T(0.5) * kmath::log(two_pi * t);
    }
    return v;
  }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t, T x, T t) const {
    return log_input ? kmath::exp(x) - t : T(1) - t / (x + eps);
  }
};

}  // namespace

template <class T>
Var<T> poisson_nll(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
                   const PoissonNLLOptions& options) {
  const char* op = "poisson_nll";
  detail::check_pointwise(op, input, target, options.reduction, false);
  DISTOP_CHECK(std::isfinite(options.eps) && options.eps >= 0, op,
               "expected a finite, non-negative eps, found ", options.eps);
  const PoissonNLLTerm<T> term{options.log_input, options.full, static_cast<T>(options.eps)};
  return detail::pointwise_loss(tape, op, input, target, options.reduction, term);
}

template Var<float> poisson_nll(Tape&, const Var<float>&, const DistTensor<float>&,
                                const PoissonNLLOptions&);
template Var<double> poisson_nll(Tape&, const Var<double>&, const DistTensor<double>&,
                                 const PoissonNLLOptions&);

}  // namespace distop::loss
