#include "distop/loss/l1.hpp"

#include "pointwise.hpp"

namespace distop::loss {

namespace {

// |x - t|; its derivative sign(x - t), 0 where x == t (torch's sgn).
template <class T>
struct L1Term {
  KOKKOS_INLINE_FUNCTION T value(std::int64_t, T x, T t) const {
    const T d = x - t;
    return d < T(0) ? -d : d;
  }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t, T x, T t) const {
    return x > t ? T(1) : (x < t ? T(-1) : T(0));
  }
};

}  // namespace

template <class T>
Var<T> l1(Tape& tape, const Var<T>& input, const DistTensor<T>& target, const L1Options& options) {
  const char* op = "l1";
  detail::check_pointwise(op, input, target, options.reduction, false);
  return detail::pointwise_loss(tape, op, input, target, options.reduction, L1Term<T>{});
}

template Var<float> l1(Tape&, const Var<float>&, const DistTensor<float>&, const L1Options&);
template Var<double> l1(Tape&, const Var<double>&, const DistTensor<double>&, const L1Options&);

}  // namespace distop::loss
