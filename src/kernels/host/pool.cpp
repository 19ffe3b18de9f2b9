#include <Kokkos_Core.hpp>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "../pool_internal.hpp"
#include "../space.hpp"
#include "../window_ranges.hpp"
#include "fast_path.hpp"
#include "pool_simd.hpp"

// The host fast paths of max and average pooling: a work item per row of outputs (or per plane),
// the window's taps outer and the row's outputs inner, so that the compiler vectorises over the
// outputs; max pooling over 2-wide windows takes the AVX-512 form (pool_simd.hpp) where the CPU
// has it, and windows of more than 64 taps a scan per output with branchless selects. pool.cpp
// calls host_fast_path::max_pool_forward and avg_pool_forward first; the portable kernels (a work
// item per output on a GPU) run where they return false.

#if DISTOP_HOST_KERNELS

namespace distop::kernels {

namespace {

using pool_detail::Geometry3;
using pool_detail::output_row;
using pool_detail::tap;

// Runs f(r, base, x_row, lo, hi, b) on the host for every row r of out[2] outputs (one work item
// per row, its indices decoded once) and every tap of its window, in row-major tap order: outputs
// o in [lo, hi) read x_row[o * stride + b], entry (x_row - x) + o * stride + b of x, where
// x_row = x + base + the input row's offset. A tap outside the input along the two leading axes
// is skipped; along the last, [lo, hi) leaves out the outputs it would read outside.
template <class T, class Start, class F>
void for_each_row_tap(const char* name, const Geometry3& g, std::int64_t planes, const T* x,
                      const Start& start, const F& f) {
  const std::int64_t m = g.out[2];
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(0, planes * g.out[0] * g.out[1]),
      KOKKOS_LAMBDA(std::int64_t r) {
        const auto [o0, o1, base] = output_row(g, r);
        start(r);
        std::int64_t i0 = 0, i1 = 0;
        for (std::int64_t j0 = 0; j0 < g.kernel[0]; ++j0) {
          if (!tap(g, 0, o0, j0, &i0)) continue;
          for (std::int64_t j1 = 0; j1 < g.kernel[1]; ++j1) {
            if (!tap(g, 1, o1, j1, &i1)) continue;
            const T* row = x + base + (i0 * g.in[1] + i1) * g.in[2];
            for (std::int64_t j2 = 0; j2 < g.kernel[2]; ++j2) {
              const std::int64_t b = j2 * g.dilation[2] - g.offset[2];
              std::int64_t lo = 0, hi = 0;
              valid_range(b, g.stride[2], g.in[2], m, lo, hi);
              f(r, row, lo, hi, b);
            }
          }
        }
      });
}

// Windows of at most this many taps take the host's blocked max-pooling kernel.
constexpr std::int64_t kMaxHostTaps = 64;

// Host max pooling, a work item per (plane, o0): its out[1] rows of out[2] outputs. A row is done
// in blocks of kBlock outputs: for each tap of the window in row-major order, a pass over the
// block's outputs updates their running maxima and the index of the winning tap, in local arrays of
// 32-bit lanes with branchless selects, which the compiler vectorises (the stride along the last
// axis, S2, is a compile-time 1 or 2 for that; 0 reads it from g). An output's first valid tap
// initialises it; a later tap wins when it is not <= the current maximum and that maximum is not
// NaN: strictly larger wins, ties keep the first, and a NaN, once taken, stays (as in PyTorch). The
// winning tap becomes an index into x at the end of the block. Which outputs a tap reads inside the
// input along the last axis depends on j2 only, so it is worked out once per call (divisions cost
// more than a short row's work).
template <class T, int S2>
void max_pool_rows(const Geometry3& g, std::int64_t planes, const T* x, T* y,
                   std::int64_t* argmax) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t m = g.out[2];
  const std::int64_t s2 = S2 > 0 ? S2 : g.stride[2];
  struct LastAxis {
    std::int64_t b[kMaxHostTaps], lo[kMaxHostTaps], hi[kMaxHostTaps];
  } last{};
  for (std::int64_t j2 = 0; j2 < g.kernel[2]; ++j2) {
    last.b[j2] = j2 * g.dilation[2] - g.offset[2];
    valid_range(last.b[j2], s2, g.in[2], m, last.lo[j2], last.hi[j2]);
  }
  Kokkos::parallel_for(
      "distop::max_pool_forward", Kokkos::RangePolicy<ExecSpace>(0, planes * g.out[0]),
      KOKKOS_LAMBDA(std::int64_t w) {
        const std::int64_t o0 = w % g.out[0];
        const std::int64_t base = (w / g.out[0]) * g.in_plane;
        for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          const std::int64_t r = w * g.out[1] + o1;
          // Per tap: the offset in x of its input for output 0, and the range of outputs for
          // which it reads inside the input (empty when its row is outside along the two leading
          // axes).
          std::int64_t tap_at[kMaxHostTaps], tap_lo[kMaxHostTaps], tap_hi[kMaxHostTaps];
          std::int32_t taps = 0;
          std::int64_t i0 = 0, i1 = 0;
          for (std::int64_t j0 = 0; j0 < g.kernel[0]; ++j0) {
            const bool in0 = tap(g, 0, o0, j0, &i0);
            for (std::int64_t j1 = 0; j1 < g.kernel[1]; ++j1) {
              const bool in1 = in0 && tap(g, 1, o1, j1, &i1);
              const std::int64_t row = base + (i0 * g.in[1] + i1) * g.in[2];
              for (std::int64_t j2 = 0; j2 < g.kernel[2]; ++j2, ++taps) {
                tap_at[taps] = row + last.b[j2];
                tap_lo[taps] = in1 ? last.lo[j2] : 0;
                tap_hi[taps] = in1 ? last.hi[j2] : 0;
              }
            }
          }
          T* const yr = y + r * m;
          std::int64_t* const ar = argmax + r * m;
          for (std::int64_t ob = 0; ob < m; ob += kBlock) {
            const std::int64_t oe = m - ob < kBlock ? m : ob + kBlock;
            T best[kBlock];
            std::int32_t won[kBlock];
            // A fixed count of entries: a handful of vector stores (a variable count becomes a
            // memset call, whose start-up costs more than these short rows).
            for (std::int64_t i = 0; i < kBlock; ++i) {
              best[i] = T(0);
              won[i] = -1;
            }
            for (std::int32_t t = 0; t < taps; ++t) {
              const std::int64_t lo = tap_lo[t] > ob ? tap_lo[t] : ob;
              const std::int64_t hi = tap_hi[t] < oe ? tap_hi[t] : oe;
              const T* const src = x + tap_at[t];
              for (std::int64_t o = lo; o < hi; ++o) {
                const T v = src[o * s2];
                const std::int64_t i = o - ob;
                const T cur = best[i];
                const bool take = (won[i] < 0) | (!(v <= cur) & (cur == cur));
                best[i] = take ? v : cur;
                won[i] = take ? t : won[i];
              }
            }
            for (std::int64_t o = ob; o < oe; ++o) {
              yr[o] = best[o - ob];
              ar[o] = tap_at[won[o - ob]] + o * s2;
            }
          }
        }
      });
}

// Whether the windows tile the last axis (kernel = stride = 2 or 3, dilation 1, no padding, every
// output inside): the common 2x2 or 3x3 pooling, which max_pool_tiled_rows runs.
bool tiles_last_axis(const Geometry3& g) {
  const std::int64_t k = g.kernel[2];
  return (k == 2 || k == 3) && g.stride[2] == k && g.dilation[2] == 1 && g.offset[2] == 0 &&
         g.out[2] * k <= g.in[2];
}

// The max of the K2 entries p[0 .. K2), first to last (ties keep the first, a NaN once taken
// stays), and in at the position of the winner; written out so that the caller's loop over
// windows vectorises.
template <class T, int K2>
inline T row_max(const T* p, std::int32_t& at) {
  T v = p[0];
  at = 0;
  const T u1 = p[1];
  const bool t1 = !(u1 <= v) & (v == v);
  v = t1 ? u1 : v;
  at = t1 ? 1 : at;
  if constexpr (K2 == 3) {
    const T u2 = p[2];
    const bool t2 = !(u2 <= v) & (v == v);
    v = t2 ? u2 : v;
    at = t2 ? 2 : at;
  }
  return v;
}

// max_pool_rows for windows that tile the last axis (K2 = kernel = stride there): the taps of one
// input row (j2 = 0 .. K2 - 1) are fused, read as one contiguous stream and reduced in registers
// before they meet the block's running maxima, so a row of taps costs one pass instead of K2. The
// order of the comparisons, and so ties and NaN, is that of max_pool_rows.
template <class T, int K2>
void max_pool_tiled_rows(const Geometry3& g, std::int64_t planes, const T* x, T* y,
                         std::int64_t* argmax) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t x_size = planes * g.in_plane;
  const std::int64_t m = g.out[2];
  // Rows of 2-wide windows take the AVX-512 form where the CPU has it (pool_simd.hpp); 2-D windows
  // 2 x 2 with stride 2 and no offset (LeNet's) take its form for a whole plane at a time.
  const bool simd = K2 == 2 && detail::simd_max_pool_2();
  const bool simd_planes = simd && g.kernel[0] == 1 && g.out[0] == 1 && g.in[0] == 1 &&
                           g.kernel[1] == 2 && g.stride[1] == 2 && g.dilation[1] == 1 &&
                           g.offset[1] == 0 && 2 * g.out[1] <= g.in[1];
  Kokkos::parallel_for(
      "distop::max_pool_forward", Kokkos::RangePolicy<ExecSpace>(0, planes * g.out[0]),
      KOKKOS_LAMBDA(std::int64_t w) {
        // nvcc will not let a lambda first capture a variable inside `if constexpr`.
        (void)simd;
        const std::int64_t o0 = w % g.out[0];
        const std::int64_t base = (w / g.out[0]) * g.in_plane;
        if (simd_planes) {
          detail::max_pool_plane_2(x, base, g.in[2], g.out[1], m, y + w * g.out[1] * m,
                                   argmax + w * g.out[1] * m);
          return;
        }
        for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1) {
          const std::int64_t r = w * g.out[1] + o1;
          // The input rows the windows of this output row read (inside along the two leading
          // axes), in row-major tap order.
          std::int64_t rows[kMaxHostTaps];
          std::int32_t row_count = 0;
          std::int64_t i0 = 0, i1 = 0;
          for (std::int64_t j0 = 0; j0 < g.kernel[0]; ++j0) {
            if (!tap(g, 0, o0, j0, &i0)) continue;
            for (std::int64_t j1 = 0; j1 < g.kernel[1]; ++j1)
              if (tap(g, 1, o1, j1, &i1)) rows[row_count++] = base + (i0 * g.in[1] + i1) * g.in[2];
          }
          T* const yr = y + r * m;
          std::int64_t* const ar = argmax + r * m;
          if constexpr (K2 == 2) {
            if (simd && row_count <= detail::kSimdPoolMaxRows) {
              detail::max_pool_row_2(x, rows, row_count, m, yr, ar);
              continue;
            }
          }
          for (std::int64_t ob = 0; ob < m; ob += kBlock) {
            const std::int64_t len = m - ob < kBlock ? m - ob : kBlock;
            // Lanes computed: the whole block where its reads stay inside x (the lanes past len
            // read the next row and are not stored), so that the loops below run a multiple of
            // the vector width with no scalar remainder, whose selects would be branches.
            const std::int64_t lanes =
                rows[row_count - 1] + (ob + kBlock) * K2 <= x_size ? kBlock : len;
            T best[kBlock];
            std::int32_t won[kBlock];  // (row number) K2 + j2 of the winning tap
            // The first row initialises the block; each later one is merged into it.
            {
              const T* const src = x + rows[0] + ob * K2;
              for (std::int64_t i = 0; i < lanes; ++i) {
                std::int32_t at = 0;
                best[i] = row_max<T, K2>(src + i * K2, at);
                won[i] = at;
              }
            }
            for (std::int32_t q = 1; q < row_count; ++q) {
              const T* const src = x + rows[q] + ob * K2;
              for (std::int64_t i = 0; i < lanes; ++i) {
                std::int32_t at = 0;
                const T v = row_max<T, K2>(src + i * K2, at);
                const T cur = best[i];
                const bool take = !(v <= cur) & (cur == cur);
                best[i] = take ? v : cur;
                won[i] = take ? q * K2 + at : won[i];
              }
            }
            if (row_count == 2) {
              // The winner's row is one of two: arithmetic instead of a lookup, which vectorises.
              const std::int64_t r0 = rows[0] + ob * K2, d = rows[1] - rows[0];
              for (std::int64_t i = 0; i < len; ++i) {
                const std::int64_t second = won[i] >= K2;
                yr[ob + i] = best[i];
                ar[ob + i] = r0 + i * K2 + second * (d - K2) + won[i];
              }
            } else {
              for (std::int64_t i = 0; i < len; ++i) {
                yr[ob + i] = best[i];
                ar[ob + i] = rows[won[i] / K2] + (ob + i) * K2 + won[i] % K2;
              }
            }
          }
        }
      });
}

// take ? a : b, computed on the bits without a branch (compilers otherwise branch, and on which
// of two values is larger the branch is mispredicted half the time: 3x slower on random data).
template <class T>
inline T select_bits(bool take, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static_assert(sizeof(T) == sizeof(Bits));
  const auto ab = std::bit_cast<Bits>(a);
  const auto bb = std::bit_cast<Bits>(b);
  const Bits keep_b = static_cast<Bits>(take) - Bits{1};  // all ones unless take
  return std::bit_cast<T>(static_cast<Bits>(ab ^ ((ab ^ bb) & keep_b)));
}

// Max pooling over windows of more than kMaxHostTaps taps, where max_pool_rows' per-tap arrays
// would not fit: a work item per row of outputs, each output's window scanned tap by tap in
// row-major order with branchless selects (the order, ties and NaN of the portable window_max).
template <class T>
void max_pool_windows(const Geometry3& g, std::int64_t planes, const T* x, T* y,
                      std::int64_t* argmax) {
  const std::int64_t m = g.out[2];
  Kokkos::parallel_for(
      "distop::max_pool_forward", Kokkos::RangePolicy<ExecSpace>(0, planes * g.out[0] * g.out[1]),
      KOKKOS_LAMBDA(std::int64_t r) {
        const auto [o0, o1, base] = output_row(g, r);
        for (std::int64_t o2 = 0; o2 < m; ++o2) {
          T b = T(0);
          std::int64_t at_b = -1;
          pool_detail::for_each_tap(g, base, o0, o1, o2, [&](std::int64_t i) {
            const T v = x[i];
            const bool take = (at_b < 0) | (v > b) | ((v != v) & (b == b));
            b = select_bits(take, v, b);
            at_b = select_bits(take, i, at_b);
          });
          y[r * m + o2] = b;
          argmax[r * m + o2] = at_b;
        }
      });
}

}  // namespace

namespace host_fast_path {

template <class T>
bool max_pool_forward(const Geometry3& g3, std::int64_t planes, const T* x, T* y,
                      std::int64_t* argmax) {
  if (!host_kernels_enabled()) return false;
  if (g3.kernel[0] * g3.kernel[1] <= kMaxHostTaps && tiles_last_axis(g3)) {
    if (g3.kernel[2] == 2)
      max_pool_tiled_rows<T, 2>(g3, planes, x, y, argmax);
    else
      max_pool_tiled_rows<T, 3>(g3, planes, x, y, argmax);
    return true;
  }
  if (g3.kernel[0] * g3.kernel[1] * g3.kernel[2] <= kMaxHostTaps) {
    if (g3.stride[2] == 1)
      max_pool_rows<T, 1>(g3, planes, x, y, argmax);
    else if (g3.stride[2] == 2)
      max_pool_rows<T, 2>(g3, planes, x, y, argmax);
    else
      max_pool_rows<T, 0>(g3, planes, x, y, argmax);
    return true;
  }
  max_pool_windows(g3, planes, x, y, argmax);
  return true;
}

template <class T>
bool avg_pool_forward(const Geometry3& g3, std::int64_t planes, const T* x, T* y, double scale) {
  if (!host_kernels_enabled()) return false;
  // As max_pool_forward's: taps outer, the row's outputs inner, the sums kept in double.
  const std::int64_t m = g3.out[2], s2 = g3.stride[2];
  const std::int64_t outputs = planes * g3.out_plane;
  Kokkos::View<double*, Kokkos::HostSpace> sums(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::avg_pool_sums"),
      static_cast<std::size_t>(outputs));
  double* const s0 = sums.data();
  T* const y0 = y;
  for_each_row_tap(
      "distop::avg_pool_forward", g3, planes, x,
      [=](std::int64_t r) {
        double* const sr = s0 + r * m;
        for (std::int64_t o = 0; o < m; ++o) sr[o] = 0;
      },
      [=](std::int64_t r, const T* row, std::int64_t lo, std::int64_t hi, std::int64_t b) {
        double* const sr = s0 + r * m;
        for (std::int64_t o = lo; o < hi; ++o) sr[o] += static_cast<double>(row[o * s2 + b]);
      });
  Kokkos::parallel_for(
      "distop::avg_pool_forward_scale", Kokkos::RangePolicy<ExecSpace>(0, outputs),
      KOKKOS_LAMBDA(std::int64_t t) { y0[t] = static_cast<T>(s0[t] * scale); });
  return true;
}

template bool max_pool_forward(const Geometry3&, std::int64_t, const float*, float*, std::int64_t*);
template bool max_pool_forward(const Geometry3&, std::int64_t, const double*, double*,
                               std::int64_t*);
template bool avg_pool_forward(const Geometry3&, std::int64_t, const float*, float*, double);
template bool avg_pool_forward(const Geometry3&, std::int64_t, const double*, double*, double);

}  // namespace host_fast_path

}  // namespace distop::kernels

#endif  // DISTOP_HOST_KERNELS
