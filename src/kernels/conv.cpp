#include "distop/kernels/conv.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "conv_internal.hpp"
#include "distop/core/error.hpp"
#include "host/fast_path.hpp"
#include "space.hpp"

// The convolution's entry points: the argument checks, then the host fast path where one applies
// (host/fast_path.hpp: the direct kernels and the bands, host/conv.cpp), else the portable im2col
// forms (conv_im2col.cpp), which are also the device's.

namespace distop::kernels {

namespace {

using conv_detail::Geo;
using conv_detail::padded;

ConvMethod g_conv_method = ConvMethod::automatic;

// ---------------------------------------------------------------------------------------------
// Shape checks.

Shape spatial_shape(std::int64_t a, std::int64_t b, const Shape& spatial) {
  std::vector<std::int64_t> e{a, b};
  e.insert(e.end(), spatial.begin(), spatial.end());
  return Shape(std::move(e));
}

template <class T>
void expect_rank(const Tensor<T>& t, const WindowGeometry& g, const char* op, const char* name,
                 const char* layout) {
  DISTOP_CHECK(t.rank() == g.dims() + 2, op, name, " is ", t.shape().str(), ", expected ", layout,
               " with ", g.dims(), " spatial axes for the window ", g.str());
}

template <class T>
void expect_shape(const Tensor<T>& t, const Shape& expected, const WindowGeometry& g,
                  const char* op, const char* name) {
  DISTOP_CHECK(t.shape() == expected, op, name, " is ", t.shape().str(), ", expected ",
               expected.str(), " for the window ", g.str());
}

// Checks g and the three tensors of a convolution: data [N, C, in...], weight [O, C, k...],
// output [N, O, out...]. Returns {N, C, O}.
struct Extents {
  std::int64_t n, c, o;
};
template <class T>
Extents check_conv(const char* op, const WindowGeometry& g, const Tensor<T>& x, const char* xn,
                   const Tensor<T>& w, const Tensor<T>& y, const char* yn, bool x_given) {
  g.validate(op);
  expect_rank(w, g, op, "w", "[O, C, k...]");
  const std::int64_t o = w.extent(0), c = w.extent(1);
  DISTOP_CHECK(o >= 1 && c >= 1, op, "w is ", w.shape().str(),
               ": a convolution needs at least one input and one output channel");
  expect_shape(w, spatial_shape(o, c, Shape(g.kernel)), g, op, "w");
  // The batch size comes from the tensor that is read: x in forward and backward weight, dy in
  // backward input.
  const Tensor<T>& src = x_given ? x : y;
  expect_rank(src, g, op, x_given ? xn : yn, x_given ? "[N, C, in...]" : "[N, O, out...]");
  const std::int64_t n = src.extent(0);
  expect_shape(x, spatial_shape(n, c, g.in), g, op, xn);
  expect_shape(y, spatial_shape(n, o, g.out), g, op, yn);
  return {n, c, o};
}

template <class T>
void scale_or_zero(T beta, Tensor<T>& t) {
  if (beta == T(0)) {
    t.fill(T(0));
  } else if (beta != T(1)) {
    auto v = t.view();
    Kokkos::parallel_for(
        "distop::conv_scale", Kokkos::RangePolicy<ExecSpace>(0, t.numel()),
        KOKKOS_LAMBDA(std::int64_t i) { v(i) *= beta; });
  }
}

}  // namespace

template <class T>
void conv_forward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& bias, Tensor<T>& y,
                  const WindowGeometry& g, ConvColumns<T>* keep) {
  constexpr const char* kOp = "conv_forward";
  const auto [n, c, o] = check_conv(kOp, g, x, "x", w, y, "y", true);
  DISTOP_CHECK(bias.numel() == 0 || bias.shape() == Shape{o}, kOp, "bias is ", bias.shape().str(),
               ", expected ", Shape{o}.str(), " or an empty tensor for none");
  DISTOP_CHECK(y.data() != x.data() || y.numel() == 0, kOp, "y aliases x");
  if (keep) *keep = ConvColumns<T>{};
  if (n == 0) return;
  const Geo geo = padded(g);
  const T* bp = bias.numel() > 0 ? bias.data() : nullptr;
  if (host_fast_path::conv_forward(x.data(), w.data(), bp, y.data(), n, c, o, geo, keep)) return;
  conv_detail::im2col_forward(x.data(), w.data(), bp, y.data(), n, c, o, geo, keep);
}

template <class T>
void conv_backward_input(const Tensor<T>& dy, const Tensor<T>& w, T beta, Tensor<T>& dx,
                         const WindowGeometry& g) {
  constexpr const char* kOp = "conv_backward_input";
  const auto [n, c, o] = check_conv(kOp, g, dx, "dx", w, dy, "dy", false);
  if (n == 0) return;
  const Geo geo = padded(g);
  if (host_fast_path::conv_backward_input(dy.data(), w.data(), beta, dx.data(), n, c, o, geo))
    return;
  conv_detail::im2col_backward_input(dy.data(), w.data(), beta, dx.data(), n, c, o, geo);
}

template <class T>
void conv_backward_weight(const Tensor<T>& dy, const Tensor<T>& x, T beta, Tensor<T>& dw,
                          const WindowGeometry& g, const ConvColumns<T>* kept) {
  constexpr const char* kOp = "conv_backward_weight";
  const auto [n, c, o] = check_conv(kOp, g, x, "x", dw, dy, "dy", true);
  if (n == 0) {
    scale_or_zero(beta, dw);
    return;
  }
  const Geo geo = padded(g);
  if (host_fast_path::conv_backward_weight(dy.data(), x.data(), beta, dw.data(), n, c, o, geo,
                                           kept))
    return;
  conv_detail::im2col_backward_weight(dy.data(), x.data(), beta, dw.data(), n, c, o, geo, kept);
}

template <class T>
void conv_backward_bias(const Tensor<T>& dy, T beta, Tensor<T>& db) {
  constexpr const char* kOp = "conv_backward_bias";
  DISTOP_CHECK(dy.rank() >= 3 && dy.rank() <= 5 && db.shape() == Shape{dy.extent(1)}, kOp,
               "expected dy [N, O, out...] with 1 to 3 spatial axes and db [O], found dy ",
               dy.shape().str(), " and db ", db.shape().str());
  const std::int64_t n = dy.extent(0), o = dy.extent(1);
  const std::int64_t p = n == 0 ? 0 : dy.numel() / (n * o);
  const T* dyp = dy.data();
  T* dbp = db.data();
  Kokkos::parallel_for(
      "distop::conv_backward_bias", Kokkos::RangePolicy<ExecSpace>(0, o),
      KOKKOS_LAMBDA(std::int64_t oc) {
        // kLanes independent accumulators, entry q of a row into lane q % kLanes: the compiler
        // turns the lanes into vectors (one accumulator would be a chain of dependent adds, an
        // add's latency per entry), and the order of the sums is fixed, whatever the CPU.
        constexpr int kLanes = 16;
        double lane[kLanes] = {};
        for (std::int64_t s = 0; s < n; ++s) {
          const T* row = dyp + (s * o + oc) * p;
          std::int64_t q = 0;
          for (; q + kLanes <= p; q += kLanes)
            for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(row[q + k]);
          for (int k = 0; q < p; ++q, ++k) lane[k] += static_cast<double>(row[q]);
        }
        for (int w = kLanes / 2; w >= 1; w /= 2)
          for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
        const double acc = lane[0];
        dbp[oc] = beta == T(0) ? static_cast<T>(acc) : beta * dbp[oc] + static_cast<T>(acc);
      });
}

template <class T>
void conv_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                   const WindowGeometry& g, const ConvGradients<T>& grads,
                   const ConvColumns<T>* kept) {
  if (grads.dw) {
    constexpr const char* kOp = "conv_backward";
    const auto [n, c, o] = check_conv(kOp, g, x, "x", *grads.dw, dy, "dy", true);
    if (grads.dx) check_conv(kOp, g, *grads.dx, "dx", w, dy, "dy", false);
    if (host_fast_path::conv_backward(dy.data(), x.data(), w.data(), grads, n, c, o, padded(g),
                                      kept))
      return;
  }
  if (grads.dw) conv_backward_weight(dy, x, grads.beta_w, *grads.dw, g, kept);
  if (grads.db) conv_backward_bias(dy, grads.beta_b, *grads.db);
  if (grads.dx) conv_backward_input(dy, w, grads.beta_x, *grads.dx, g);
}

void set_conv_method(ConvMethod method) { g_conv_method = method; }
ConvMethod conv_method() { return g_conv_method; }

namespace {
std::int64_t g_kept_columns_limit = kMaxKeptColumnsBytes;
}  // namespace

void set_conv_kept_columns_limit(std::int64_t bytes) {
  DISTOP_CHECK(bytes >= 0, "set_conv_kept_columns_limit",
               "the limit is a number of bytes, at least 0, found ", bytes);
  g_kept_columns_limit = bytes;
}
std::int64_t conv_kept_columns_limit() { return g_kept_columns_limit; }

#define DISTOP_INSTANTIATE_CONV(T)                                                             \
  template void conv_forward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, Tensor<T>&, \
                             const WindowGeometry&, ConvColumns<T>*);                          \
  template void conv_backward_input(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&,         \
                                    const WindowGeometry&);                                    \
  template void conv_backward_weight(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&,        \
                                     const WindowGeometry&, const ConvColumns<T>*);            \
  template void conv_backward_bias(const Tensor<T>&, T, Tensor<T>&);                           \
  template void conv_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,            \
                              const WindowGeometry&, const ConvGradients<T>&,                  \
                              const ConvColumns<T>*);
DISTOP_INSTANTIATE_CONV(float)
DISTOP_INSTANTIATE_CONV(double)
#undef DISTOP_INSTANTIATE_CONV

}  // namespace distop::kernels
