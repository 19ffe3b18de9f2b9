#include "distop/kernels/elementwise.hpp"

// The functions of one tensor of kernels/elementwise.hpp and their derivatives: one portable Kokkos
// loop for every forward (map) and one for every backward (map_grad), each function a functor.

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"

namespace distop::kernels {

namespace {

template <class T>
void check_counts(const Tensor<T>& a, const Tensor<T>& b, const char* op) {
  DISTOP_CHECK(a.numel() == b.numel(), op, "element counts differ: ", a.shape().str(), " and ",
               b.shape().str());
}

// The functions and their derivatives as functors, which (unlike lambdas handed from function to
// function) are callable inside device kernels on every Kokkos backend. A derivative functor maps
// (saved, dy) to the contribution dy f'(.).
struct Relu {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return x < T(0) ? T(0) : x;  // a NaN passes on (x > 0 ? x : 0 would make it 0)
  }
};
struct ReluGrad {  // from the input x
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    return x > T(0) ? dy : T(0);
  }
};
struct Sigmoid {
  // exp of a non-positive argument only, so that no intermediate overflows.
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + kmath::exp(-x));
    const T e = kmath::exp(x);
    return e / (T(1) + e);
  }
};
struct SigmoidGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy * y * (T(1) - y);
  }
};
struct Tanh {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kmath::tanh(x);
  }
};
struct TanhGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy * (T(1) - y * y);
  }
};
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
struct Rsqrt {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return T(1) / kmath::sqrt(x);
  }
};
struct RsqrtGrad {  // from the output y: d(x^-1/2)/dx = -x^-3/2 / 2 = -y^3 / 2
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return T(-0.5) * dy * y * y * y;
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

// sqrt(2), 1 / sqrt(2 pi) and sqrt(2 / pi), the constants of GELU's two forms.
constexpr double kSqrt2 = 1.4142135623730950488;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;
struct Gelu {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return T(0.5) * x * (T(1) + kmath::erf(x / T(kSqrt2)));
  }
};
struct GeluGrad {  // from the input x: Phi(x) + x phi(x)
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    const T cdf = T(0.5) * (T(1) + kmath::erf(x / T(kSqrt2)));
    const T pdf = T(kInvSqrt2Pi) * kmath::exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};
struct GeluTanh {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    return T(0.5) * x * (T(1) + kmath::tanh(u));
  }
};
struct GeluTanhGrad {  // from the input x
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    const T t = kmath::tanh(u);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
};
struct Silu {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return x * Sigmoid{}(x);
  }
};
struct SiluGrad {  // from the input x
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    const T s = Sigmoid{}(x);
    return dy * s * (T(1) + x * (T(1) - s));
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

// dx = beta dx + g(saved, dy). Two loops, so that the overwriting one (beta 0, the common case:
// a gradient's first contribution) neither reads dx nor tests beta per entry.
template <class T, class G>
void map_grad(const char* op, const Tensor<T>& saved, const Tensor<T>& dy, T beta, Tensor<T>& dx,
              G g) {
  check_counts(saved, dy, op);
  check_counts(saved, dx, op);
  auto sv = saved.view();
  auto dyv = dy.view();
  auto dxv = dx.view();
  const Kokkos::RangePolicy<ExecSpace> all(0, saved.numel());
  if (beta == T(0))
    Kokkos::parallel_for(
        op, all, KOKKOS_LAMBDA(std::int64_t i) { dxv(i) = g(sv(i), dyv(i)); });
  else
    Kokkos::parallel_for(
        op, all, KOKKOS_LAMBDA(std::int64_t i) { dxv(i) = g(sv(i), dyv(i)) + beta * dxv(i); });
}

}  // namespace

#define DISTOP_UNARY(name, F, G)                                                             \
  template <class T>                                                                         \
  void name(const Tensor<T>& x, Tensor<T>& y) {                                              \
    map("distop::" #name, x, y, F{});                                                        \
  }                                                                                          \
  template <class T>                                                                         \
  void name##_backward(const Tensor<T>& saved, const Tensor<T>& dy, T beta, Tensor<T>& dx) { \
    map_grad("distop::" #name "_backward", saved, dy, beta, dx, G{});                        \
  }
DISTOP_UNARY(relu, Relu, ReluGrad)
DISTOP_UNARY(sigmoid, Sigmoid, SigmoidGrad)
DISTOP_UNARY(tanh, Tanh, TanhGrad)
DISTOP_UNARY(exp, Exp, ExpGrad)
DISTOP_UNARY(log, Log, LogGrad)
DISTOP_UNARY(sqrt, Sqrt, SqrtGrad)
DISTOP_UNARY(rsqrt, Rsqrt, RsqrtGrad)
DISTOP_UNARY(logsigmoid, LogSigmoid, LogSigmoidGrad)
DISTOP_UNARY(gelu, Gelu, GeluGrad)
DISTOP_UNARY(gelu_tanh, GeluTanh, GeluTanhGrad)
DISTOP_UNARY(silu, Silu, SiluGrad)
#undef DISTOP_UNARY

template <class T>
void clamp(const Tensor<T>& x, T lo, T hi, Tensor<T>& y) {
  map("distop::clamp", x, y, Clamp<T>{lo, hi});
}
template <class T>
void clamp_backward(const Tensor<T>& x, T lo, T hi, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
  map_grad("distop::clamp_backward", x, dy, beta, dx, ClampGrad<T>{lo, hi});
}

#define DISTOP_INSTANTIATE_UNARY(T, name)           \
  template void name(const Tensor<T>&, Tensor<T>&); \
  template void name##_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);
#define DISTOP_INSTANTIATE(T)                              \
  DISTOP_INSTANTIATE_UNARY(T, relu)                        \
  DISTOP_INSTANTIATE_UNARY(T, sigmoid)                     \
  DISTOP_INSTANTIATE_UNARY(T, tanh)                        \
  DISTOP_INSTANTIATE_UNARY(T, exp)                         \
  DISTOP_INSTANTIATE_UNARY(T, log)                         \
  DISTOP_INSTANTIATE_UNARY(T, sqrt)                        \
  DISTOP_INSTANTIATE_UNARY(T, rsqrt)                       \
  DISTOP_INSTANTIATE_UNARY(T, logsigmoid)                  \
  DISTOP_INSTANTIATE_UNARY(T, gelu)                        \
  DISTOP_INSTANTIATE_UNARY(T, gelu_tanh)                   \
  DISTOP_INSTANTIATE_UNARY(T, silu)                        \
  template void clamp(const Tensor<T>&, T, T, Tensor<T>&); \
  template void clamp_backward(const Tensor<T>&, T, T, const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE
#undef DISTOP_INSTANTIATE_UNARY

}  // namespace distop::kernels
