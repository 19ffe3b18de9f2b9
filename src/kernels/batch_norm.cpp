#include "distop/kernels/batch_norm.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

namespace {

// [N, C, S] of a tensor [N, C, s...].
struct Planes {
  std::int64_t n, c, s;
};

template <class T>
Planes planes(const Tensor<T>& x, const char* op) {
  DISTOP_CHECK(x.rank() >= 2, op, "expected a tensor [N, C, spatial...], found ", x.shape().str());
  const std::int64_t n = x.extent(0), c = x.extent(1);
  return {n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}

void check_stats(const Tensor<double>& t, std::int64_t rows, std::int64_t c, const char* op,
                 const char* what) {
  const Shape expected = rows == 1 ? Shape{c} : Shape{rows, c};
  DISTOP_CHECK(t.shape() == expected, op, what, " has shape ", t.shape().str(), ", expected ",
               expected.str());
}

template <class T>
void check_affine(const Tensor<T>& t, std::int64_t c, const char* op, const char* what) {
  DISTOP_CHECK(t.numel() == 0 || t.shape() == Shape{c}, op, what, " has shape ", t.shape().str(),
               ", expected [", c, "] (or empty: no affine transform)");
}

template <class T>
void check_same(const Tensor<T>& a, const Tensor<T>& b, const char* op, const char* what) {
  DISTOP_CHECK(a.shape() == b.shape(), op, what, " has shape ", b.shape().str(), ", expected ",
               a.shape().str());
}

// The summands as functors, which (unlike lambdas handed from function to function) are callable
// inside device kernels on every Kokkos backend.
template <class V>
struct Value {
  V x;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t, std::int64_t i) const {
    return static_cast<double>(x(i));
  }
};
template <class V, class S>
struct SquaredDeviation {
  V x;
  S mean;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t c, std::int64_t i) const {
    const double d = static_cast<double>(x(i)) - mean(c);
    return d * d;
  }
};
template <class V, class S>
struct TimesXhat {  // dy xhat
  V dy, x;
  S mean, invstd;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t c, std::int64_t i) const {
    return static_cast<double>(dy(i)) * (static_cast<double>(x(i)) - mean(c)) * invstd(c);
  }
};

// out[row, c] = the sum over n, s of f(c, entry index), for each channel c: one work item per
// channel.
template <class F>
void per_channel(const char* name, const Planes& p, const Tensor<double>& out, std::int64_t row,
                 F f) {
  auto ov = out.view();
  const Planes q = p;
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(0, q.c), KOKKOS_LAMBDA(std::int64_t c) {
        double acc = 0;
        for (std::int64_t n = 0; n < q.n; ++n)
          for (std::int64_t i = (n * q.c + c) * q.s; i < (n * q.c + c + 1) * q.s; ++i)
            acc += f(c, i);
        ov(row * q.c + c) = acc;
      });
}

}  // namespace

template <class T>
void channel_sums(const Tensor<T>& x, Tensor<double>& sums) {
  const Planes p = planes(x, "channel_sums");
  check_stats(sums, 1, p.c, "channel_sums", "sums");
  auto xv = x.view();
  per_channel("distop::channel_sums", p, sums, 0, Value<decltype(xv)>{xv});
}

template <class T>
void channel_squared_deviations(const Tensor<T>& x, const Tensor<double>& mean,
                                Tensor<double>& sums) {
  constexpr const char* op = "channel_squared_deviations";
  const Planes p = planes(x, op);
  check_stats(mean, 1, p.c, op, "mean");
  check_stats(sums, 1, p.c, op, "sums");
  auto xv = x.view();
  auto mv = mean.view();
  per_channel("distop::channel_squared_deviations", p, sums, 0,
              SquaredDeviation<decltype(xv), decltype(mv)>{xv, mv});
}

template <class T>
void batch_norm_forward(const Tensor<T>& x, const Tensor<double>& mean,
                        const Tensor<double>& invstd, const Tensor<T>& weight,
                        const Tensor<T>& bias, Tensor<T>& y) {
  constexpr const char* op = "batch_norm_forward";
  const Planes p = planes(x, op);
  check_stats(mean, 1, p.c, op, "mean");
  check_stats(invstd, 1, p.c, op, "invstd");
  check_affine(weight, p.c, op, "weight");
  check_affine(bias, p.c, op, "bias");
  check_same(x, y, op, "y");
  const bool has_w = weight.numel() > 0, has_b = bias.numel() > 0;
  auto xv = x.view();
  auto yv = y.view();
  auto mv = mean.view();
  auto sv = invstd.view();
  auto wv = weight.view();
  auto bv = bias.view();
  const std::int64_t s = p.s, channels = p.c;
  Kokkos::parallel_for(
      "distop::batch_norm_forward", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t c = (i / s) % channels;
        const double xhat = (static_cast<double>(xv(i)) - mv(c)) * sv(c);
        const double w = has_w ? static_cast<double>(wv(c)) : 1.0;
        const double b = has_b ? static_cast<double>(bv(c)) : 0.0;
        yv(i) = static_cast<T>(w * xhat + b);
      });
}

template <class T>
void batch_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& mean,
                              const Tensor<double>& invstd, Tensor<double>& sums) {
  constexpr const char* op = "batch_norm_backward_sums";
  const Planes p = planes(x, op);
  check_same(x, dy, op, "dy");
  check_stats(mean, 1, p.c, op, "mean");
  check_stats(invstd, 1, p.c, op, "invstd");
  check_stats(sums, 2, p.c, op, "sums");
  auto xv = x.view();
  auto dyv = dy.view();
  auto mv = mean.view();
  auto sv = invstd.view();
  per_channel("distop::batch_norm_backward_sums", p, sums, 0, Value<decltype(dyv)>{dyv});
  per_channel("distop::batch_norm_backward_sums", p, sums, 1,
              TimesXhat<decltype(xv), decltype(mv)>{dyv, xv, mv, sv});
}

template <class T>
void batch_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& mean,
                               const Tensor<double>& invstd, const Tensor<T>& weight,
                               const Tensor<double>& sums, double count, T beta, Tensor<T>& dx) {
  constexpr const char* op = "batch_norm_backward_input";
  const Planes p = planes(x, op);
  check_same(x, dy, op, "dy");
  check_same(x, dx, op, "dx");
  check_stats(mean, 1, p.c, op, "mean");
  check_stats(invstd, 1, p.c, op, "invstd");
  check_affine(weight, p.c, op, "weight");
  const bool batch_stats = sums.numel() > 0;
  if (batch_stats) {
    check_stats(sums, 2, p.c, op, "sums");
    DISTOP_CHECK(count > 0, op, "batch statistics over ", count, " entries");
  }
  const bool has_w = weight.numel() > 0;
  auto xv = x.view();
  auto dyv = dy.view();
  auto dxv = dx.view();
  auto mv = mean.view();
  auto sv = invstd.view();
  auto wv = weight.view();
  auto sumv = sums.view();
  const std::int64_t s = p.s, channels = p.c;
  const double inv_count = batch_stats ? 1.0 / count : 0.0;
  Kokkos::parallel_for(
      "distop::batch_norm_backward_input", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t c = (i / s) % channels;
        const double w = has_w ? static_cast<double>(wv(c)) : 1.0;
        double g = static_cast<double>(dyv(i));
        if (batch_stats) {
          const double xhat = (static_cast<double>(xv(i)) - mv(c)) * sv(c);
          g -= (sumv(c) + xhat * sumv(channels + c)) * inv_count;
        }
        const T v = static_cast<T>(w * sv(c) * g);
        dxv(i) = beta == T(0) ? v : v + beta * dxv(i);
      });
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template void channel_sums(const Tensor<T>&, Tensor<double>&);                                   \
  template void channel_squared_deviations(const Tensor<T>&, const Tensor<double>&,                \
                                           Tensor<double>&);                                       \
  template void batch_norm_forward(const Tensor<T>&, const Tensor<double>&, const Tensor<double>&, \
                                   const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                \
  template void batch_norm_backward_sums(const Tensor<T>&, const Tensor<T>&,                       \
                                         const Tensor<double>&, const Tensor<double>&,             \
                                         Tensor<double>&);                                         \
  template void batch_norm_backward_input(                                                         \
      const Tensor<T>&, const Tensor<T>&, const Tensor<double>&, const Tensor<double>&,            \
      const Tensor<T>&, const Tensor<double>&, double, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
