#include "distop/loss/kl_div.hpp"

#include "../kernels/kokkos_math.hpp"
#include "pointwise.hpp"

namespace distop::loss {

namespace {

namespace kmath = kernels::kmath;

// torch's kl_div term of log-probabilities x: xlogy(t, t) - t x (0 log 0 = 0), or with log_target
// exp(t) (t - x); its derivative -t, or -exp(t).
template <class T>
struct KLDivTerm {
  bool log_target;
  KOKKOS_INLINE_FUNCTION T value(std::int64_t, T x, T t) const {
    if (log_target) return kmath::exp(t) * (t - x);
    const T t_log_t = t == T(0) ? T(0) : t * kmath::log(t);
    return t_log_t - t * x;
  }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t, T, T t) const {
    return log_target ? -kmath::exp(t) : -t;
  }
};

}  // namespace

template <class T>
Var<T> kl_div(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
              const KLDivOptions& options) {
  const char* op = "kl_div";
  detail::check_pointwise(op, input, target, options.reduction, true);
  return detail::pointwise_loss(tape, op, input, target, options.reduction,
                                KLDivTerm<T>{options.log_target});
}

template Var<float> kl_div(Tape&, const Var<float>&, const DistTensor<float>&, const KLDivOptions&);
template Var<double> kl_div(Tape&, const Var<double>&, const DistTensor<double>&,
                            const KLDivOptions&);

}  // namespace distop::loss
