#include "distop/kernels/interpolate.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/error.hpp"

namespace distop::kernels {

const char* interpolate_mode_name(InterpolateMode mode) noexcept {
  switch (mode) {
    case InterpolateMode::nearest:
      return "nearest";
    case InterpolateMode::nearest_exact:
      return "nearest-exact";
    case InterpolateMode::linear:
      return "linear";
    case InterpolateMode::bilinear:
      return "bilinear";
    case InterpolateMode::trilinear:
      return "trilinear";
  }
  return "?";
}

template <class T>
InterpolateTaps<T> interpolate_taps(const InterpolateAxis& axis, InterpolateMode mode,
                                    bool align_corners, std::int64_t o) {
  const std::int64_t n = axis.in, m = axis.out;
  DISTOP_CHECK(n >= 1 && m >= 1 && o >= 0 && o < m, "interpolate_taps", "output ", o,
               " of an axis of ", n, " inputs and ", m, " outputs");
  InterpolateTaps<T> t;
  if (!is_linear(mode)) {
    std::int64_t i = 0;
    if (mode == InterpolateMode::nearest && m == n) {
      i = o;
    } else if (mode == InterpolateMode::nearest && m == 2 * n) {
      i = o >> 1;
    } else {
      // compute_scales_value<float>, then floorf of a float (nearest) or of a double rounded to
      // float (nearest-exact: (o + 0.5) is a double in torch's expression).
      const float s = axis.scale > 0 ? static_cast<float>(1.0 / axis.scale)
                                     : static_cast<float>(n) / static_cast<float>(m);
      const float f = mode == InterpolateMode::nearest
                          ? static_cast<float>(o) * s
                          : static_cast<float>((static_cast<double>(o) + 0.5) * s);
      i = std::min(static_cast<std::int64_t>(std::floor(f)), n - 1);
    }
    t.i0 = t.i1 = i;
    return t;
  }
  if (m == n) {  // torch copies (scale factor 1), whatever align_corners and the scale say
    t.i0 = t.i1 = o;
    return t;
  }
  T r;
  if (align_corners)
    r = m > 1 ? static_cast<T>(n - 1) / static_cast<T>(m - 1) : T(0);
  else
    r = axis.scale > 0 ? static_cast<T>(1.0 / axis.scale) : static_cast<T>(n) / static_cast<T>(m);
  T x;
  if (align_corners) {
    x = r * static_cast<T>(o);
  } else {
    x = r * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
    if (x < T(0)) x = T(0);
  }
  t.i0 = std::min(static_cast<std::int64_t>(x), n - 1);  // x >= 0: truncation is the floor
  t.i1 = t.i0 + (t.i0 < n - 1 ? 1 : 0);
  t.w1 = std::min(std::max(x - static_cast<T>(t.i0), T(0)), T(1));
  t.w0 = T(1) - t.w1;
  return t;
}

std::string InterpolateGeometry::str() const {
  std::string axes_s;
  for (std::size_t a = 0; a < axes.size(); ++a)
    axes_s += detail::concat(
        a ? ", " : "", axes[a].in, " -> ", axes[a].out,
        axes[a].scale > 0 ? detail::concat(" (scale ", axes[a].scale, ")") : std::string());
  return detail::concat("{", interpolate_mode_name(mode), align_corners ? ", align_corners" : "",
                        ", axes [", axes_s, "], in_begin ", Shape(in_begin).str(), ", out_begin ",
                        Shape(out_begin).str(), ", in ", in.str(), ", out ", out.str(), "}");
}

InterpolateGeometry InterpolateGeometry::whole(InterpolateMode mode, bool align_corners,
                                               std::vector<InterpolateAxis> axes) {
  InterpolateGeometry g;
  g.mode = mode;
  g.align_corners = align_corners;
  std::vector<std::int64_t> in, out;
  for (const auto& a : axes) {
    in.push_back(a.in);
    out.push_back(a.out);
  }
  g.in_begin.assign(axes.size(), 0);
  g.out_begin.assign(axes.size(), 0);
  g.axes = std::move(axes);
  g.in = Shape(in);
  g.out = Shape(out);
  return g;
}

void InterpolateGeometry::validate(const char* where) const {
  const int d = dims();
  DISTOP_CHECK(d >= 1 && d <= 3, where, "interpolation has 1 to 3 spatial axes, found ", d, " in ",
               str());
  DISTOP_CHECK(static_cast<int>(in_begin.size()) == d && static_cast<int>(out_begin.size()) == d &&
                   in.rank() == d && out.rank() == d,
               where, "the fields of an interpolation geometry must all have ", d,
               " entries (one per spatial axis), found ", str());
  const int ld = linear_mode_dims(mode);
  DISTOP_CHECK(ld == 0 || ld == d, where, "mode '", interpolate_mode_name(mode), "' interpolates ",
               ld, " spatial axis(es) (input of rank ", ld + 2, "), but the input has ", d,
               " (rank ", d + 2, ")");
  DISTOP_CHECK(!align_corners || is_linear(mode), where,
               "align_corners applies to the linear modes only, not to '",
               interpolate_mode_name(mode), "'");
  for (int a = 0; a < d; ++a) {
    const auto u = static_cast<std::size_t>(a);
    const InterpolateAxis& ax = axes[u];
    DISTOP_CHECK(ax.in >= 1 && ax.out >= 1 && std::isfinite(ax.scale) && ax.scale >= 0, where,
                 "axis ", a, ": extents must be at least 1 and a scale positive (0: none), found ",
                 str());
    DISTOP_CHECK(
        in[a] >= 1 && out[a] >= 1 && out_begin[u] >= 0 && out_begin[u] + out[a] <= ax.out, where,
        "axis ", a, ": the local outputs [", out_begin[u], ", ", out_begin[u] + out[a], ") and ",
        in[a], " local inputs must be non-empty, the outputs inside [0, ", ax.out, "), in ", str());
  }
}

namespace {

// [N, C, extents...]
Shape with_planes(const Shape& like, const Shape& extents) {
  std::vector<std::int64_t> s{like[0], like[1]};
  s.insert(s.end(), extents.begin(), extents.end());
  return Shape(std::move(s));
}

// Checks g and that x is [N, C, g.in...] and y [N, C, g.out...] (same N, C); returns N * C.
template <class T>
std::int64_t check_shapes(const Tensor<T>& x, const Tensor<T>& y, const InterpolateGeometry& g,
                          const char* op, const char* xn, const char* yn) {
  g.validate(op);
  DISTOP_CHECK(x.rank() == g.dims() + 2 && x.shape() == with_planes(x.shape(), g.in), op,
               "expected ", xn, " of shape [N, C, ", g.in.str(), "...] for ", g.str(), ", found ",
               x.shape().str());
  const Shape expected = with_planes(x.shape(), g.out);
  DISTOP_CHECK(y.shape() == expected, op, yn, " has shape ", y.shape().str(), ", expected ",
               expected.str());
  return x.extent(0) * x.extent(1);
}

// The geometry as exactly 3 axes, the missing leading ones of extent 1 with one tap of weight 1
// (taps[a] = 1; a present axis has 2 taps in a linear mode, 1 in a nearest mode). Per axis a,
// entries [off[a], off[a] + 2 out[a]) of the tables hold output o's two local input indices and
// weights at off[a] + 2 o + j. Trivially copyable, for the kernels' lambdas.
struct Tables3 {
  std::int64_t in[3], out[3], taps[3], off[3];
  std::int64_t in_plane, out_plane;
};

// A host vector as a View in MemSpace.
template <class E>
Kokkos::View<E*, MemSpace> to_device(const std::vector<E>& v, const char* label) {
  Kokkos::View<E*, MemSpace> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                               v.size());
  Kokkos::View<const E*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(v.data(),
                                                                                       v.size());
  Kokkos::deep_copy(d, h);
  return d;
}

// The per-axis taps of every local output, in local input indices, built on the host from the
// index rule and checked to lie inside the local array (an Error naming `op` otherwise).
template <class T>
struct HostTables {
  Tables3 t{};
  std::vector<std::int64_t> index;
  std::vector<T> weight;
};

template <class T>
HostTables<T> host_tables(const InterpolateGeometry& g, const char* op) {
  HostTables<T> h;
  Tables3& t = h.t;
  const int lead = 3 - g.dims();
  const bool linear = is_linear(g.mode);
  std::int64_t total = 0;
  for (int a = 0; a < 3; ++a) {
    const bool present = a >= lead;
    t.in[a] = present ? g.in[a - lead] : 1;
    t.out[a] = present ? g.out[a - lead] : 1;
    t.taps[a] = present && linear ? 2 : 1;
    t.off[a] = total;
    total += 2 * t.out[a];
  }
  t.in_plane = t.in[0] * t.in[1] * t.in[2];
  t.out_plane = t.out[0] * t.out[1] * t.out[2];
  h.index.assign(static_cast<std::size_t>(total), 0);
  h.weight.assign(static_cast<std::size_t>(total), T(0));
  for (int a = 0; a < 3; ++a) {
    const auto at = [&](std::int64_t o, int j) {
      return static_cast<std::size_t>(t.off[a] + 2 * o + j);
    };
    if (a < lead) {  // one tap of weight 1 at index 0
      h.weight[at(0, 0)] = T(1);
      continue;
    }
    const auto u = static_cast<std::size_t>(a - lead);
    const std::int64_t begin = g.in_begin[u], end = begin + g.in[a - lead];
    for (std::int64_t o = 0; o < t.out[a]; ++o) {
      const std::int64_t go = g.out_begin[u] + o;
      const InterpolateTaps<T> taps = interpolate_taps<T>(g.axes[u], g.mode, g.align_corners, go);
      DISTOP_CHECK(taps.i0 >= begin && taps.i1 < end, op, "output ", go, " along spatial axis ",
                   a - lead, " reads the inputs ", taps.i0, "..", taps.i1,
                   ", outside the local array's entries [", begin, ", ", end, ") of ", g.str());
      h.index[at(o, 0)] = taps.i0 - begin;
      h.index[at(o, 1)] = taps.i1 - begin;
      h.weight[at(o, 0)] = taps.w0;
      h.weight[at(o, 1)] = taps.w1;
    }
  }
  return h;
}

// The transpose of the tables, per axis: for local input i of axis a, the (output, weight) pairs
// of the taps that read it, in the order of output and tap, at entries [ptr[pbase[a] + i],
// ptr[pbase[a] + i + 1]) of `output` and `weight`.
template <class T>
struct BackwardTables {
  Tables3 t{};
  std::int64_t pbase[3]{};
  Kokkos::View<std::int64_t*, MemSpace> ptr;
  Kokkos::View<std::int64_t*, MemSpace> output;
  Kokkos::View<T*, MemSpace> weight;
};

template <class T>
BackwardTables<T> backward_tables(const InterpolateGeometry& g, const char* op) {
  const HostTables<T> h = host_tables<T>(g, op);
  BackwardTables<T> b;
  b.t = h.t;
  std::vector<std::int64_t> ptr, outs;
  std::vector<T> ws;
  for (int a = 0; a < 3; ++a) {
    b.pbase[a] = static_cast<std::int64_t>(ptr.size());
    // The taps grouped by input index, each group in (output, tap) order.
    std::vector<std::vector<std::int64_t>> by_input(static_cast<std::size_t>(h.t.in[a]));
    for (std::int64_t o = 0; o < h.t.out[a]; ++o)
      for (std::int64_t j = 0; j < h.t.taps[a]; ++j) {
        const std::int64_t k = h.t.off[a] + 2 * o + j;
        by_input[static_cast<std::size_t>(h.index[static_cast<std::size_t>(k)])].push_back(k);
      }
    for (const auto& taps : by_input) {
      ptr.push_back(static_cast<std::int64_t>(outs.size()));
      for (std::int64_t k : taps) {
        outs.push_back((k - h.t.off[a]) / 2);
        ws.push_back(h.weight[static_cast<std::size_t>(k)]);
      }
    }
    ptr.push_back(static_cast<std::int64_t>(outs.size()));
  }
  b.ptr = to_device(ptr, "distop::interpolate_ptr");
  b.output = to_device(outs, "distop::interpolate_output");
  b.weight = to_device(ws, "distop::interpolate_tap_weight");
  return b;
}

}  // namespace

template <class T>
void interpolate_forward(const Tensor<T>& x, Tensor<T>& y, const InterpolateGeometry& g) {
  constexpr const char* op = "interpolate_forward";
  const std::int64_t planes = check_shapes(x, y, g, op, "x", "y");
  const HostTables<T> h = host_tables<T>(g, op);
  if (planes == 0) return;
  const Tables3 t = h.t;
  auto xv = x.view();
  auto yv = y.view();
  auto iv = to_device(h.index, "distop::interpolate_index");
  auto wv = to_device(h.weight, "distop::interpolate_weight");
  const bool linear = is_linear(g.mode);
  using Policy =
      Kokkos::MDRangePolicy<ExecSpace,
                            Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                            Kokkos::IndexType<std::int64_t>>;
  // A work item per output, over (plane and output row, position in the row), the last index
  // along memory.
  Kokkos::parallel_for(
      "distop::interpolate_forward", Policy({0, 0}, {planes * t.out[0] * t.out[1], t.out[2]}),
      KOKKOS_LAMBDA(std::int64_t r, std::int64_t o2) {
        const std::int64_t o1 = r % t.out[1];
        const std::int64_t o0 = (r / t.out[1]) % t.out[0];
        const std::int64_t base = (r / (t.out[1] * t.out[0])) * t.in_plane;
        const std::int64_t k0 = t.off[0] + 2 * o0, k1 = t.off[1] + 2 * o1, k2 = t.off[2] + 2 * o2;
        const std::int64_t out = r * t.out[2] + o2;
        if (!linear) {
          yv(out) = xv(base + (iv(k0) * t.in[1] + iv(k1)) * t.in[2] + iv(k2));
          return;
        }
        // torch's nesting: sum_j0 (sum_j1 (sum_j2 x w2) w1) w0, each sum started by its first term.
        T s0 = T(0);
        for (std::int64_t j0 = 0; j0 < t.taps[0]; ++j0) {
          T s1 = T(0);
          for (std::int64_t j1 = 0; j1 < t.taps[1]; ++j1) {
            const std::int64_t row = base + (iv(k0 + j0) * t.in[1] + iv(k1 + j1)) * t.in[2];
            T s2 = T(0);
            for (std::int64_t j2 = 0; j2 < t.taps[2]; ++j2) {
              const T v = xv(row + iv(k2 + j2)) * wv(k2 + j2);
              s2 = j2 == 0 ? v : s2 + v;
            }
            const T v = s2 * wv(k1 + j1);
            s1 = j1 == 0 ? v : s1 + v;
          }
          const T v = s1 * wv(k0 + j0);
          s0 = j0 == 0 ? v : s0 + v;
        }
        yv(out) = s0;
      });
}

template <class T>
void interpolate_backward(const Tensor<T>& dy, T beta, Tensor<T>& dx,
                          const InterpolateGeometry& g) {
  constexpr const char* op = "interpolate_backward";
  const std::int64_t planes = check_shapes(dx, dy, g, op, "dx", "dy");
  const BackwardTables<T> b = backward_tables<T>(g, op);
  if (planes == 0) return;
  const Tables3 t = b.t;
  const std::int64_t p0 = b.pbase[0], p1 = b.pbase[1], p2 = b.pbase[2];
  auto dyv = dy.view();
  auto dxv = dx.view();
  auto pv = b.ptr;
  auto ov = b.output;
  auto wv = b.weight;
  using Policy =
      Kokkos::MDRangePolicy<ExecSpace,
                            Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                            Kokkos::IndexType<std::int64_t>>;
  // A work item per input entry, gathering from the outputs that read it.
  Kokkos::parallel_for(
      "distop::interpolate_backward", Policy({0, 0}, {planes * t.in[0] * t.in[1], t.in[2]}),
      KOKKOS_LAMBDA(std::int64_t r, std::int64_t i2) {
        const std::int64_t i1 = r % t.in[1];
        const std::int64_t i0 = (r / t.in[1]) % t.in[0];
        const std::int64_t base = (r / (t.in[1] * t.in[0])) * t.out_plane;
        T sum = T(0);
        for (std::int64_t e0 = pv(p0 + i0); e0 < pv(p0 + i0 + 1); ++e0)
          for (std::int64_t e1 = pv(p1 + i1); e1 < pv(p1 + i1 + 1); ++e1) {
            const T w01 = wv(e0) * wv(e1);
            const std::int64_t row = base + (ov(e0) * t.out[1] + ov(e1)) * t.out[2];
            for (std::int64_t e2 = pv(p2 + i2); e2 < pv(p2 + i2 + 1); ++e2)
              sum += w01 * wv(e2) * dyv(row + ov(e2));
          }
        const std::int64_t at = r * t.in[2] + i2;
        dxv(at) = beta == T(0) ? sum : beta * dxv(at) + sum;
      });
}

#define DISTOP_INSTANTIATE(T)                                                                  \
  template InterpolateTaps<T> interpolate_taps(const InterpolateAxis&, InterpolateMode, bool,  \
                                               std::int64_t);                                  \
  template void interpolate_forward(const Tensor<T>&, Tensor<T>&, const InterpolateGeometry&); \
  template void interpolate_backward(const Tensor<T>&, T, Tensor<T>&, const InterpolateGeometry&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
