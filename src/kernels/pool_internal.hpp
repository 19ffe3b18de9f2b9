#pragma once
// Internal: what pool.cpp (the portable pooling kernels) and host/pool.cpp (the host fast paths of
// max and average pooling) share.

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "distop/kernels/window.hpp"

namespace distop::kernels::pool_detail {

// A geometry of d <= 3 axes seen as one of exactly 3, the missing leading axes of extent 1 with a
// window of one tap: one kernel serves every d. Trivially copyable, so lambdas capture it.
struct Geometry3 {
  std::int64_t kernel[3], stride[3], dilation[3], offset[3], in[3], out[3];
  std::int64_t in_plane, out_plane;  // entries per (n, c) plane
};

inline Geometry3 geometry3(const WindowGeometry& g) {
  Geometry3 r{};
  const int lead = 3 - g.dims();
  for (int a = 0; a < 3; ++a) {
    const bool present = a >= lead;
    const auto i = static_cast<std::size_t>(a - lead);
    r.kernel[a] = present ? g.kernel[i] : 1;
    r.stride[a] = present ? g.stride[i] : 1;
    r.dilation[a] = present ? g.dilation[i] : 1;
    r.offset[a] = present ? g.offset[i] : 0;
    r.in[a] = present ? g.in[a - lead] : 1;
    r.out[a] = present ? g.out[a - lead] : 1;
  }
  r.in_plane = r.in[0] * r.in[1] * r.in[2];
  r.out_plane = r.out[0] * r.out[1] * r.out[2];
  return r;
}

// Whether tap j of output o along one axis reads input index *i (set) inside [0, n).
KOKKOS_INLINE_FUNCTION bool tap(const Geometry3& g, int a, std::int64_t o, std::int64_t j,
                                std::int64_t* i) {
  *i = o * g.stride[a] - g.offset[a] + j * g.dilation[a];
  return *i >= 0 && *i < g.in[a];
}

// Calls f(i) with the index i into x of every tap of the window of output (o0, o1, o2) that reads
// inside the input, for the plane starting at x[base], in row-major tap order.
template <class F>
KOKKOS_INLINE_FUNCTION void for_each_tap(const Geometry3& g, std::int64_t base, std::int64_t o0,
                                         std::int64_t o1, std::int64_t o2, const F& f) {
  std::int64_t i0 = 0, i1 = 0, i2 = 0;
  for (std::int64_t j0 = 0; j0 < g.kernel[0]; ++j0) {
    if (!tap(g, 0, o0, j0, &i0)) continue;
    for (std::int64_t j1 = 0; j1 < g.kernel[1]; ++j1) {
      if (!tap(g, 1, o1, j1, &i1)) continue;
      const std::int64_t row = base + (i0 * g.in[1] + i1) * g.in[2];
      for (std::int64_t j2 = 0; j2 < g.kernel[2]; ++j2)
        if (tap(g, 2, o2, j2, &i2)) f(row + i2);
    }
  }
}

// Row r of the outputs (planes x out[0] x out[1] rows of out[2]): its indices along the two
// leading spatial axes and the offset of its plane in x.
struct OutputRow {
  std::int64_t o0, o1, base;
};
KOKKOS_INLINE_FUNCTION OutputRow output_row(const Geometry3& g, std::int64_t r) {
  const std::int64_t q = r / g.out[1];
  return {q % g.out[0], r % g.out[1], (q / g.out[0]) * g.in_plane};
}

}  // namespace distop::kernels::pool_detail
