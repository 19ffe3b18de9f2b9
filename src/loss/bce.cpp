#include "distop/loss/bce.hpp"

#include <string>

#include "../kernels/kokkos_math.hpp"
#include "distop/comm/agree.hpp"
#include "pointwise.hpp"

namespace distop::loss {

namespace {

namespace kmath = kernels::kmath;

// torch's binary_cross_entropy term, each log clamped at -100; its derivative as torch's
// backward computes it, (x - t) / max(x (1 - x), 1e-12).
template <class T>
struct BCETerm {
  KOKKOS_INLINE_FUNCTION T value(std::int64_t, T x, T t) const {
    const T lo = T(-100);
    const T log_x = kmath::log(x);
    const T log_1mx = kmath::log1p(-x);
    return (t - T(1)) * (log_1mx > lo ? log_1mx : lo) - t * (log_x > lo ? log_x : lo);
  }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t, T x, T t) const {
    const T d = (T(1) - x) * x;
    const T eps = T(1e-12);
    return (x - t) / (d > eps ? d : eps);
  }
};

// The number of entries of x outside [0, 1] (NaNs included).
template <class T>
std::int64_t count_outside_unit(const Tensor<T>& x) {
  auto v = x.view();
  std::int64_t n = 0;
  Kokkos::parallel_reduce(
      "distop::loss::count_outside_unit", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & acc) {
        if (!(v(i) >= T(0) && v(i) <= T(1))) ++acc;
      },
      n);
  return n;
}

constexpr int kMaxAxes = 8;
using Axes = Kokkos::Array<std::int64_t, kMaxAxes>;

// torch's binary_cross_entropy_with_logits term, with w = 1 + (p - 1) t for the entry's positive
// weight p: (1 - t) x + w (log1p(exp(-|x|)) + max(-x, 0)); its derivative w sigmoid(x) - p t.
template <class T>
struct BCEWithLogitsTerm {
  typename Tensor<T>::View pos_weight;  // empty: every weight 1
  bool weighted = false;
  // Per input axis: this rank's extent, its box's offset and pos_weight's stride (0 along a
  // broadcast axis), to find an entry's weight from its flat index in the box.
  int rank = 0;
  Axes extent{}, offset{}, stride{};

  KOKKOS_INLINE_FUNCTION T weight(std::int64_t i) const {
    if (!weighted) return T(1);
    std::int64_t k = 0;
    for (int d = rank - 1; d >= 0; --d) {
      k += (i % extent[d] + offset[d]) * stride[d];
      i /= extent[d];
    }
    return pos_weight(k);
  }
  KOKKOS_INLINE_FUNCTION T value(std::int64_t i, T x, T t) const {
    const T w = T(1) + (weight(i) - T(1)) * t;
    const T minus_abs = x < T(0) ? x : -x;
    const T relu_minus = x < T(0) ? -x : T(0);
    return (T(1) - t) * x + w * (kmath::log1p(kmath::exp(minus_abs)) + relu_minus);
  }
  KOKKOS_INLINE_FUNCTION T grad(std::int64_t i, T x, T t) const {
    const T p = weight(i);
    const T w = T(1) + (p - T(1)) * t;
    T sigmoid;  // exp of a non-positive argument only
    if (x >= T(0)) {
      sigmoid = T(1) / (T(1) + kmath::exp(-x));
    } else {
      const T e = kmath::exp(x);
      sigmoid = e / (T(1) + e);
    }
    return w * sigmoid - p * t;
  }
};

// The term of `input`'s space, with pos_weight's strides and this rank's box. An Error (on every
// rank: the shapes are global) when pos_weight does not broadcast against the input.
template <class T>
BCEWithLogitsTerm<T> make_logits_term(const char* op, const TensorSpace& s,
                                      const std::optional<Tensor<T>>& pos_weight) {
  BCEWithLogitsTerm<T> term;
  if (!pos_weight) return term;
  const Shape& global = s.global_shape();
  const Shape& pw = pos_weight->shape();
  const int r = global.rank(), pr = pw.rank();
  bool fits = pr <= r;
  for (int a = 0; fits && a < pr; ++a) fits = pw[a] == 1 || pw[a] == global[r - pr + a];
  DISTOP_CHECK(fits, op, "expected a pos_weight that broadcasts against the input's global shape ",
               global.str(),
               " (torch's rules: aligned with its trailing axes, each extent equal "
               "or 1), found ",
               pw.str());
  DISTOP_CHECK(r <= kMaxAxes, op, "expected an input of at most ", kMaxAxes,
               " axes with a pos_weight, found ", global.str());
  term.pos_weight = pos_weight->view();
  term.weighted = true;
  term.rank = r;
  const Shape& box = s.local_shape();
  const std::vector<std::int64_t>& offset = s.local_offset();
  std::int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    const int a = d - (r - pr);  // pos_weight's axis aligned with input axis d
    term.extent[d] = box.rank() == r ? box[d] : 0;
    term.offset[d] = static_cast<std::size_t>(d) < offset.size() ? offset[d] : 0;
    term.stride[d] = a >= 0 && pw[a] != 1 ? stride : 0;
    if (a >= 0) stride *= pw[a];
  }
  return term;
}

}  // namespace

template <class T>
Var<T> bce(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
           const BCEOptions& options) {
  const char* op = "bce";
  detail::check_pointwise(op, input, target, options.reduction, false);
  // torch refuses entries outside [0, 1]: the ranks agree, so that every one of them throws.
  const std::int64_t bad_input = count_outside_unit(input.value().local());
  const std::int64_t bad_target = count_outside_unit(target.local());
  std::string problem;
  if (bad_input > 0)
    problem = "expected every entry of the input in [0, 1] (probabilities), found " +
              std::to_string(bad_input) + " outside it (or NaN) in this rank's box";
  else if (bad_target > 0)
    problem = "expected every entry of the target in [0, 1], found " + std::to_string(bad_target) +
              " outside it (or NaN) in this rank's box";
  comm::agree_ok(input.space().partition().parent(), op, problem.empty(), problem);
  return detail::pointwise_loss(tape, op, input, target, options.reduction, BCETerm<T>{});
}

template <class T>
Var<T> bce_with_logits(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
                       const BCEWithLogitsOptions<T>& options) {
  const char* op = "bce_with_logits";
  detail::check_pointwise(op, input, target, options.reduction, false);
  const BCEWithLogitsTerm<T> term = make_logits_term(op, input.space(), options.pos_weight);
  // The term refers to pos_weight's storage, which the backward keeps alive.
  return detail::pointwise_loss(tape, op, input, target, options.reduction, term,
                                options.pos_weight.value_or(Tensor<T>()));
}

#define DISTOP_INSTANTIATE(T)                                                         \
  template Var<T> bce(Tape&, const Var<T>&, const DistTensor<T>&, const BCEOptions&); \
  template Var<T> bce_with_logits(Tape&, const Var<T>&, const DistTensor<T>&,         \
                                  const BCEWithLogitsOptions<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::loss
