#include "distop/kernels/pointwise.hpp"

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"

namespace distop::kernels {

namespace {

template <class T>
void check_counts(const Tensor<T>& a, const Tensor<T>& b, const char* op) {
  DISTOP_CHECK(a.numel() == b.numel(), op, "element counts differ: ", a.shape().str(), " and ",
               b.shape().str());
}

// The functions and their derivatives as functors (callable inside device kernels on every
// Kokkos backend, as lambdas handed from function to function are not).
struct Exp {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kmath::exp(x);
  }
};
struct ExpGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy * y;
  }
};
struct Log {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kmath::log(x);
  }
};
struct LogGrad {  // from the input x
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    return dy / x;
  }
};
struct Sqrt {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kmath::sqrt(x);
  }
};
struct SqrtGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy / (T(2) * y);
  }
};
template <class T>
struct Clamp {
  T lo, hi;
  // Comparisons that are false for a NaN, so that it passes through; then hi wins over lo.
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    const T v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
};
template <class T>
struct ClampGrad {  // from the input x; torch passes the gradient at the bounds too
  T lo, hi;
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const { return lo <= x && x <= hi ? dy : T(0); }
};
struct LogSigmoid {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    const T m = x < T(0) ? x : T(0);
    return m - kmath::log1p(kmath::exp(x < T(0) ? x : -x));
  }
};
struct LogSigmoidGrad {  // from the input x: sigmoid(-x), exp of a non-positive argument only
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    if (x >= T(0)) {
      const T e = kmath::exp(-x);
      return dy * e / (T(1) + e);
    }
    return dy / (T(1) + kmath::exp(x));
  }
};

// y = f(x)
template <class T, class F>
void map(const char* op, const Tensor<T>& x, Tensor<T>& y, F f) {
  check_counts(x, y, op);
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      op, Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) = f(xv(i)); });
}

// dx = beta dx + g(saved, dy)
template <class T, class G>
void map_grad(const char* op, const Tensor<T>& saved, const Tensor<T>& dy, T beta, Tensor<T>& dx,
              G g) {
  check_counts(saved, dy, op);
  check_counts(saved, dx, op);
  auto sv = saved.view();
  auto dyv = dy.view();
  auto dxv = dx.view();
  Kokkos::parallel_for(
      op, Kokkos::RangePolicy<ExecSpace>(0, saved.numel()), KOKKOS_LAMBDA(std::int64_t i) {
        const T v = g(sv(i), dyv(i));
        dxv(i) = beta == T(0) ? v : v + beta * dxv(i);
      });
}

}  // namespace

template <class T>
void exp(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::exp", x, y, Exp{});
}
template <class T>
void exp_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::exp_backward", y, dy, beta, dx, ExpGrad{});
}
template <class T>
void log(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::log", x, y, Log{});
}
template <class T>
void log_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::log_backward", x, dy, beta, dx, LogGrad{});
}
template <class T>
void sqrt(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::sqrt", x, y, Sqrt{});
}
template <class T>
void sqrt_backward(const Tensor<T>& y, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::sqrt_backward", y, dy, beta, dx, SqrtGrad{});
}
template <class T>
void clamp(const Tensor<T>& x, T lo, T hi, Tensor<T>& y) {
  map("distop::clamp", x, y, Clamp<T>{lo, hi});
}
template <class T>
void clamp_backward(const Tensor<T>& x, T lo, T hi, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::clamp_backward", x, dy, beta, dx, ClampGrad<T>{lo, hi});
}
template <class T>
void logsigmoid(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::logsigmoid", x, y, LogSigmoid{});
}
template <class T>
void logsigmoid_backward(const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::logsigmoid_backward", x, dy, beta, dx, LogSigmoidGrad{});
}

#define DISTOP_INSTANTIATE(T)                                                            \
  template void exp(const Tensor<T>&, Tensor<T>&);                                       \
  template void exp_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);         \
  template void log(const Tensor<T>&, Tensor<T>&);                                       \
  template void log_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);         \
  template void sqrt(const Tensor<T>&, Tensor<T>&);                                      \
  template void sqrt_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);        \
  template void clamp(const Tensor<T>&, T, T, Tensor<T>&);                               \
  template void clamp_backward(const Tensor<T>&, T, T, const Tensor<T>&, T, Tensor<T>&); \
  template void logsigmoid(const Tensor<T>&, Tensor<T>&);                                \
  template void logsigmoid_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
