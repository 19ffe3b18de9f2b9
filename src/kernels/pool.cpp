#include "distop/kernels/pool.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <limits>
#include <vector>

#include "distop/core/error.hpp"
#include "host/fast_path.hpp"
#include "pool_internal.hpp"
#include "space.hpp"
#include "window_ranges.hpp"

namespace distop::kernels {

namespace {

using pool_detail::for_each_tap;
using pool_detail::geometry3;
using pool_detail::Geometry3;
using pool_detail::output_row;
using pool_detail::OutputRow;
using pool_detail::tap;

// [N, C, extents...]
Shape with_planes(const Shape& like, const Shape& extents) {
  std::vector<std::int64_t> s{like[0], like[1]};
  s.insert(s.end(), extents.begin(), extents.end());
  return Shape(std::move(s));
}

// Checks g and that x is [N, C, g.in...] and y [N, C, g.out...]; returns N * C.
template <class T>
std::int64_t check_shapes(const Tensor<T>& x, const Tensor<T>& y, const WindowGeometry& g,
                          const char* op, const char* xn, const char* yn) {
  g.validate(op);
  DISTOP_CHECK(x.rank() == g.dims() + 2 && x.shape() == with_planes(x.shape(), g.in), op,
               "expected ", xn, " of shape [N, C, ", g.in.str(), "...] for the window ", g.str(),
               ", found ", x.shape().str());
  const Shape expected = with_planes(x.shape(), g.out);
  DISTOP_CHECK(y.shape() == expected, op, yn, " has shape ", y.shape().str(), ", expected ",
               expected.str());
  return x.extent(0) * x.extent(1);
}

// The max over the window of output (o0, o1, o2) of the plane starting at x[base]: its value and
// index into x. Taps in row-major order; a later tap wins only when strictly larger (ties to the
// first), and a NaN, once taken, stays (it propagates, as in PyTorch).
template <class T, class View>
KOKKOS_INLINE_FUNCTION void window_max(const Geometry3& g, const View& x, std::int64_t base,
                                       std::int64_t o0, std::int64_t o1, std::int64_t o2, T* best,
                                       std::int64_t* best_at) {
  T b = T(0);
  std::int64_t at_b = -1;
  for_each_tap(g, base, o0, o1, o2, [&](std::int64_t i) {
    const T v = x(i);
    if (at_b < 0 || v > b || (v != v && b == b)) {
      b = v;
      at_b = i;
    }
  });
  *best = b;
  *best_at = at_b;
}

// The sum over the window of output (o0, o1, o2) of the plane starting at x[base], in double.
template <class View>
KOKKOS_INLINE_FUNCTION double window_sum(const Geometry3& g, const View& x, std::int64_t base,
                                         std::int64_t o0, std::int64_t o1, std::int64_t o2) {
  double sum = 0;
  for_each_tap(g, base, o0, o1, o2, [&](std::int64_t i) { sum += static_cast<double>(x(i)); });
  return sum;
}

// Runs f(base, o0, o1, o2, t) for every output t of planes [N C] planes of out[0] out[1] out[2]
// outputs, base = the plane's first input entry: a work item per output, over (plane and output
// row, position in the row) with the last index along memory (Iterate::Right), so that on a GPU
// neighbouring threads take neighbouring outputs and on the host the inner loop runs along a row
// with the row's indices decoded once. (On the host, the fast paths of the forward passes,
// host_fast_path::max_pool_forward and avg_pool_forward, run instead.)
template <class F>
void for_each_output(const char* name, const Geometry3& g, std::int64_t planes, const F& f) {
  using Policy =
      Kokkos::MDRangePolicy<ExecSpace,
                            Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                            Kokkos::IndexType<std::int64_t>>;
  Kokkos::parallel_for(
      name, Policy({0, 0}, {planes * g.out[0] * g.out[1], g.out[2]}),
      KOKKOS_LAMBDA(std::int64_t r, std::int64_t o2) {
        const OutputRow row = output_row(g, r);
        f(row.base, row.o0, row.o1, o2, r * g.out[2] + o2);
      });
}

// An Error unless every output reads at least one input along every axis (a max over padding
// alone has no value).
void check_no_padding_only_window(const WindowGeometry& g, const char* op) {
  const Geometry3 g3 = geometry3(g);
  for (int a = 0; a < 3; ++a)
    for (std::int64_t o = 0; o < g3.out[a]; ++o) {
      bool reads = false;
      std::int64_t i = 0;
      for (std::int64_t j = 0; j < g3.kernel[a] && !reads; ++j) reads = tap(g3, a, o, j, &i);
      DISTOP_CHECK(reads, op, "output ", o, " along spatial axis ", a - (3 - g.dims()),
                   " reads padding only, for the window ", g.str());
    }
}

}  // namespace

template <class T>
void max_pool_forward(const Tensor<T>& x, Tensor<T>& y, ArgmaxView& argmax,
                      const WindowGeometry& g) {
  constexpr const char* op = "max_pool_forward";
  const std::int64_t planes = check_shapes(x, y, g, op, "x", "y");
  check_no_padding_only_window(g, op);
  if (argmax.extent(0) != static_cast<std::size_t>(y.numel()))
    argmax = ArgmaxView(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::argmax"),
                        static_cast<std::size_t>(y.numel()));
  const Geometry3 g3 = geometry3(g);
  auto xv = x.view();
  auto yv = y.view();
  auto av = argmax;
  if (host_fast_path::max_pool_forward(g3, planes, x.data(), y.data(), argmax.data())) return;
  for_each_output(
      "distop::max_pool_forward", g3, planes,
      KOKKOS_LAMBDA(std::int64_t base, std::int64_t o0, std::int64_t o1, std::int64_t o2,
                    std::int64_t t) {
        T best;
        std::int64_t best_at;
        window_max(g3, xv, base, o0, o1, o2, &best, &best_at);
        yv(t) = best;
        av(t) = best_at;
      });
}

template <class T>
void max_pool_backward(const Tensor<T>& dy, const ArgmaxView& argmax, T beta, Tensor<T>& dx) {
  constexpr const char* op = "max_pool_backward";
  DISTOP_CHECK(dy.rank() >= 3 && dx.rank() == dy.rank() && dx.extent(0) == dy.extent(0) &&
                   dx.extent(1) == dy.extent(1),
               op, "expected dy [N, C, out...] and dx [N, C, in...] with the same N, C and ",
               "number of spatial axes, found dy ", dy.shape().str(), " and dx ", dx.shape().str());
  DISTOP_CHECK(argmax.extent(0) == static_cast<std::size_t>(dy.numel()), op, "argmax has ",
               argmax.extent(0), " entries, expected one per entry of dy ", dy.shape().str());
  const std::int64_t planes = dy.extent(0) * dy.extent(1);
  if (planes == 0) return;
  const std::int64_t out_plane = dy.numel() / planes;
  const std::int64_t in_plane = dx.numel() / planes;
  auto dyv = dy.view();
  auto dxv = dx.view();
  auto av = argmax;
  // The windows of one (n, c) plane read that plane only, so a work item per plane scatters its
  // outputs in order: no two work items write the same entry (no atomics), and overlapping windows
  // sum in a fixed order (deterministic).
  Kokkos::parallel_for(
      "distop::max_pool_backward", Kokkos::RangePolicy<ExecSpace>(0, planes),
      KOKKOS_LAMBDA(std::int64_t p) {
        for (std::int64_t i = p * in_plane; i < (p + 1) * in_plane; ++i)
          dxv(i) = beta == T(0) ? T(0) : beta * dxv(i);
        for (std::int64_t t = p * out_plane; t < (p + 1) * out_plane; ++t) dxv(av(t)) += dyv(t);
      });
}

template <class T>
void avg_pool_forward(const Tensor<T>& x, Tensor<T>& y, const WindowGeometry& g) {
  const std::int64_t planes = check_shapes(x, y, g, "avg_pool_forward", "x", "y");
  const Geometry3 g3 = geometry3(g);
  const double scale = 1.0 / static_cast<double>(g.kernel_numel());
  auto xv = x.view();
  auto yv = y.view();
  if (host_fast_path::avg_pool_forward(g3, planes, x.data(), y.data(), scale)) return;
  for_each_output(
      "distop::avg_pool_forward", g3, planes,
      KOKKOS_LAMBDA(std::int64_t base, std::int64_t o0, std::int64_t o1, std::int64_t o2,
                    std::int64_t t) {
        yv(t) = static_cast<T>(window_sum(g3, xv, base, o0, o1, o2) * scale);
      });
}

namespace {

// The outputs o along axis a whose tap j reads input i: o = (i + offset - j dilation) / stride
// when that divides exactly and 0 <= o < out.
KOKKOS_INLINE_FUNCTION bool reader(const Geometry3& g, int a, std::int64_t i, std::int64_t j,
                                   std::int64_t* o) {
  const std::int64_t num = i + g.offset[a] - j * g.dilation[a];
  if (num < 0 || num % g.stride[a] != 0) return false;
  *o = num / g.stride[a];
  return *o < g.out[a];
}

}  // namespace

template <class T>
void avg_pool_backward(const Tensor<T>& dy, T beta, Tensor<T>& dx, const WindowGeometry& g) {
  const std::int64_t planes = check_shapes(dx, dy, g, "avg_pool_backward", "dx", "dy");
  const Geometry3 g3 = geometry3(g);
  const double scale = 1.0 / static_cast<double>(g.kernel_numel());
  auto dyv = dy.view();
  auto dxv = dx.view();
  // Each input entry gathers dy / K from the outputs whose windows read it: no two work items
  // write the same entry.
  Kokkos::parallel_for(
      "distop::avg_pool_backward", Kokkos::RangePolicy<ExecSpace>(0, planes * g3.in_plane),
      KOKKOS_LAMBDA(std::int64_t t) {
        const std::int64_t p = t / g3.in_plane;
        std::int64_t r = t % g3.in_plane;
        const std::int64_t i2 = r % g3.in[2];
        r /= g3.in[2];
        const std::int64_t i1 = r % g3.in[1];
        const std::int64_t i0 = r / g3.in[1];
        const std::int64_t base = p * g3.out_plane;
        double sum = 0;
        std::int64_t o0 = 0, o1 = 0, o2 = 0;
        for (std::int64_t j0 = 0; j0 < g3.kernel[0]; ++j0) {
          if (!reader(g3, 0, i0, j0, &o0)) continue;
          for (std::int64_t j1 = 0; j1 < g3.kernel[1]; ++j1) {
            if (!reader(g3, 1, i1, j1, &o1)) continue;
            for (std::int64_t j2 = 0; j2 < g3.kernel[2]; ++j2)
              if (reader(g3, 2, i2, j2, &o2))
                sum += static_cast<double>(dyv(base + (o0 * g3.out[1] + o1) * g3.out[2] + o2));
          }
        }
        const T v = static_cast<T>(sum * scale);
        dxv(t) = beta == T(0) ? v : v + beta * dxv(t);
      });
}

#define DISTOP_INSTANTIATE(T)                                                          \
  template void max_pool_forward(const Tensor<T>&, Tensor<T>&, ArgmaxView&,            \
                                 const WindowGeometry&);                               \
  template void max_pool_backward(const Tensor<T>&, const ArgmaxView&, T, Tensor<T>&); \
  template void avg_pool_forward(const Tensor<T>&, Tensor<T>&, const WindowGeometry&); \
  template void avg_pool_backward(const Tensor<T>&, T, Tensor<T>&, const WindowGeometry&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
