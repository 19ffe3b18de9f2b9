#include "distop/kernels/conv.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/scratch.hpp"
#include "conv_direct.hpp"
#include "distop/core/error.hpp"
#include "gemm_raw.hpp"
#include "space.hpp"
#include "window_ranges.hpp"

namespace distop::kernels {

namespace {

using detail::gemm_raw;

// How many samples share one im2col matrix and one GEMM. A GEMM per sample reads the samples in
// place (no permutation of y or dy), but once a sample has few output positions its GEMM is too
// narrow for BLAS to run well, so samples are grouped until the matrix has about kMinColumns
// columns, within kMaxScratchBytes of scratch. A GPU wants the whole batch in one GEMM.
constexpr std::int64_t kMinColumns = kHostKernels ? 1024 : (std::int64_t{1} << 40);
constexpr std::int64_t kMaxScratchBytes =
    kHostKernels ? (std::int64_t{64} << 20) : (std::int64_t{512} << 20);

// Scratch leased from the library's pool (core/scratch.hpp), in the default memory space.
using ::distop::detail::Scratch;

// ---------------------------------------------------------------------------------------------
// The geometry padded to 3 spatial axes: a 1-D or 2-D window gets leading axes of extent 1, so
// that one set of kernels serves every dimension.
struct Geo {
  std::int64_t in[3], out[3], k[3], s[3], dil[3], off[3];
  std::int64_t taps;   // k[0] k[1] k[2]
  std::int64_t in_n;   // in[0] in[1] in[2]: input entries per channel
  std::int64_t out_n;  // out[0] out[1] out[2]: output positions per channel
  bool pointwise;      // 1x1 kernel, stride 1, offset 0: the im2col matrix is x itself
};

Geo padded(const WindowGeometry& g) {
  Geo r{};
  const int d = g.dims();
  for (int a = 0; a < 3; ++a) {
    const int s = a - (3 - d);  // the spatial axis of g, or negative for a padding axis
    const auto u = static_cast<std::size_t>(s);
    r.in[a] = s < 0 ? 1 : g.in[s];
    r.out[a] = s < 0 ? 1 : g.out[s];
    r.k[a] = s < 0 ? 1 : g.kernel[u];
    r.s[a] = s < 0 ? 1 : g.stride[u];
    r.dil[a] = s < 0 ? 1 : g.dilation[u];
    r.off[a] = s < 0 ? 0 : g.offset[u];
  }
  r.taps = r.k[0] * r.k[1] * r.k[2];
  r.in_n = r.in[0] * r.in[1] * r.in[2];
  r.out_n = r.out[0] * r.out[1] * r.out[2];
  r.pointwise = true;
  for (int a = 0; a < 3; ++a)
    r.pointwise = r.pointwise && r.k[a] == 1 && r.s[a] == 1 && r.off[a] == 0 && r.in[a] == r.out[a];
  return r;
}

// dst[i] += src[i] for i < n, on the host; the two runs do not overlap, which the compiler is
// told so that it vectorises the loop without a run-time overlap check (runs are short: an
// output row, often 10-30 entries).
template <class T>
inline void add_run(T* __restrict dst, const T* __restrict src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
// dst[i] = src[i] for i < n: memcpy for long runs, an inline loop for short ones (a call costs
// more than copying a few dozen bytes).
template <class T>
inline void copy_run(T* __restrict dst, const T* __restrict src, std::int64_t n) {
  if (n >= 32) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

// One run of an im2col-style matrix on the host: dst[o] = row[o * s2 + b] for o in [lo, hi) (the
// outputs whose tap reads inside the input row), zero for the rest of [0, m); all zero when row
// is null (the tap's row lies outside the input).
template <class T>
inline void read_run(T* dst, const T* row, std::int64_t m, std::int64_t lo, std::int64_t hi,
                     std::int64_t b, std::int64_t s2) {
  if (row == nullptr) {
    for (std::int64_t o = 0; o < m; ++o) dst[o] = T(0);
    return;
  }
  for (std::int64_t o = 0; o < lo; ++o) dst[o] = T(0);
  if (s2 == 1) {
    copy_run(dst + lo, row + lo + b, hi - lo);
  } else {
    for (std::int64_t o = lo; o < hi; ++o) dst[o] = row[o * s2 + b];
  }
  for (std::int64_t o = hi; o < m; ++o) dst[o] = T(0);
}

// The adjoint of read_run: row[o * s2 + b] += src[o] for o in [lo, hi).
template <class T>
inline void add_back_run(T* row, const T* src, std::int64_t lo, std::int64_t hi, std::int64_t b,
                         std::int64_t s2) {
  if (s2 == 1) {
    add_run(row + lo + b, src + lo, hi - lo);
  } else {
    for (std::int64_t o = lo; o < hi; ++o) row[o * s2 + b] += src[o];
  }
}

// p[0 .. n) = beta p (not read when beta is 0): the start of an accumulated gradient.
template <class T>
inline void scale_or_zero_run(T* p, std::int64_t n, T beta) {
  if (beta == T(0)) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = T(0);
  } else if (beta != T(1)) {
    for (std::int64_t i = 0; i < n; ++i) p[i] *= beta;
  }
}

// col [C taps, nb P] (row (c, j), column (sample, output position)) from the nb samples of x
// [nb, C, in...] starting at x; zero where a tap reads outside the input.
template <class T>
void im2col(const T* x, std::int64_t nb, std::int64_t channels, const Geo& g, T* col) {
  const std::int64_t len = nb * g.out_n;  // row length of col
  const std::int64_t rows_k = channels * g.taps;
  if constexpr (kHostKernels) {
    // One work item per row of col: for each sample, out[0] out[1] runs of out[2] entries, each
    // read from one input row (or zero). The indices are decoded once per row (64-bit divisions
    // cost as much as copying a short run) and then advance incrementally; the tap's valid range
    // along the last axis is the same for every run.
    Kokkos::parallel_for(
        "distop::im2col", Kokkos::RangePolicy<ExecSpace>(0, rows_k), KOKKOS_LAMBDA(std::int64_t r) {
          const std::int64_t j2 = r % g.k[2];
          const std::int64_t j1 = (r / g.k[2]) % g.k[1];
          const std::int64_t j0 = (r / (g.k[2] * g.k[1])) % g.k[0];
          const std::int64_t ch = r / g.taps;
          const std::int64_t m = g.out[2], s2 = g.s[2];
          const std::int64_t b = j2 * g.dil[2] - g.off[2];
          std::int64_t lo = 0, hi = 0;
          valid_range(b, s2, g.in[2], m, lo, hi);
          T* dst = col + r * len;
          for (std::int64_t nl = 0; nl < nb; ++nl) {
            const T* xs = x + (nl * channels + ch) * g.in_n;
            for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0) {
              const std::int64_t i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
              const bool in0 = i0 >= 0 && i0 < g.in[0];
              for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1, dst += m) {
                const std::int64_t i1 = o1 * g.s[1] - g.off[1] + j1 * g.dil[1];
                const bool inside = in0 && i1 >= 0 && i1 < g.in[1];
                read_run(dst, inside ? xs + (i0 * g.in[1] + i1) * g.in[2] : nullptr, m, lo, hi, b,
                         s2);
              }
            }
          }
        });
  } else {
    Kokkos::parallel_for(
        "distop::im2col", Kokkos::RangePolicy<ExecSpace>(0, rows_k * len),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t r = w / len;
          const std::int64_t cidx = w % len;
          const std::int64_t nl = cidx / g.out_n;
          std::int64_t p = cidx % g.out_n;
          const std::int64_t o2 = p % g.out[2];
          p /= g.out[2];
          const std::int64_t o1 = p % g.out[1];
          const std::int64_t o0 = p / g.out[1];
          const std::int64_t j2 = r % g.k[2];
          const std::int64_t j1 = (r / g.k[2]) % g.k[1];
          const std::int64_t j0 = (r / (g.k[2] * g.k[1])) % g.k[0];
          const std::int64_t ch = r / g.taps;
          const std::int64_t i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
          const std::int64_t i1 = o1 * g.s[1] - g.off[1] + j1 * g.dil[1];
          const std::int64_t i2 = o2 * g.s[2] - g.off[2] + j2 * g.dil[2];
          const bool inside =
              i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
          col[w] =
              inside ? x[(nl * channels + ch) * g.in_n + (i0 * g.in[1] + i1) * g.in[2] + i2] : T(0);
        });
  }
}

// dx = beta dx + col2im(col) for the nb samples of dx [nb, C, in...] starting at dx: the adjoint
// of im2col. Each work item owns entries of dx and gathers the columns that read them, so no two
// work items write the same entry. When beta is 0, dx is not read.
template <class T>
void col2im(const T* col, std::int64_t nb, std::int64_t channels, const Geo& g, T beta, T* dx) {
  const std::int64_t len = nb * g.out_n;
  if constexpr (kHostKernels) {
    // One work item per sample and channel: it owns the entries dx[n, c, ...] and walks the
    // rows of col that read them in im2col's order (each row a sequential stream), adding each
    // run of out[2] entries to the input row it was read from.
    Kokkos::parallel_for(
        "distop::col2im", Kokkos::RangePolicy<ExecSpace>(0, nb * channels),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t ch = w % channels;
          const std::int64_t nl = w / channels;
          T* dxs = dx + w * g.in_n;
          scale_or_zero_run(dxs, g.in_n, beta);
          const std::int64_t m = g.out[2], s2 = g.s[2];
          for (std::int64_t j0 = 0; j0 < g.k[0]; ++j0) {
            for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1) {
              for (std::int64_t j2 = 0; j2 < g.k[2]; ++j2) {
                const std::int64_t r = ch * g.taps + (j0 * g.k[1] + j1) * g.k[2] + j2;
                const std::int64_t b = j2 * g.dil[2] - g.off[2];
                std::int64_t lo = 0, hi = 0;
                valid_range(b, s2, g.in[2], m, lo, hi);
                const T* src = col + r * len + nl * g.out_n;
                for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0) {
                  const std::int64_t i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
                  const bool in0 = i0 >= 0 && i0 < g.in[0];
                  for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1, src += m) {
                    const std::int64_t i1 = o1 * g.s[1] - g.off[1] + j1 * g.dil[1];
                    if (!in0 || i1 < 0 || i1 >= g.in[1]) continue;
                    T* dst = dxs + (i0 * g.in[1] + i1) * g.in[2];
                    add_back_run(dst, src, lo, hi, b, s2);
                  }
                }
              }
            }
          }
        });
  } else {
    Kokkos::parallel_for(
        "distop::col2im", Kokkos::RangePolicy<ExecSpace>(0, nb * channels * g.in_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t i2 = w % g.in[2];
          std::int64_t t = w / g.in[2];
          const std::int64_t i1 = t % g.in[1];
          t /= g.in[1];
          const std::int64_t i0 = t % g.in[0];
          t /= g.in[0];
          const std::int64_t ch = t % channels;
          const std::int64_t nl = t / channels;
          T acc = T(0);
          for (std::int64_t j0 = 0; j0 < g.k[0]; ++j0) {
            const std::int64_t t0 = i0 + g.off[0] - j0 * g.dil[0];
            if (t0 < 0 || t0 % g.s[0] != 0 || t0 / g.s[0] >= g.out[0]) continue;
            for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1) {
              const std::int64_t t1 = i1 + g.off[1] - j1 * g.dil[1];
              if (t1 < 0 || t1 % g.s[1] != 0 || t1 / g.s[1] >= g.out[1]) continue;
              for (std::int64_t j2 = 0; j2 < g.k[2]; ++j2) {
                const std::int64_t t2 = i2 + g.off[2] - j2 * g.dil[2];
                if (t2 < 0 || t2 % g.s[2] != 0 || t2 / g.s[2] >= g.out[2]) continue;
                const std::int64_t r = ch * g.taps + (j0 * g.k[1] + j1) * g.k[2] + j2;
                const std::int64_t p =
                    ((t0 / g.s[0]) * g.out[1] + t1 / g.s[1]) * g.out[2] + t2 / g.s[2];
                acc += col[r * len + nl * g.out_n + p];
              }
            }
          }
          dx[w] = beta == T(0) ? acc : beta * dx[w] + acc;
        });
  }
}

// The layouts [nb, O, P] (a block of y or dy) and [O, nb P] (the GEMM's when nb samples share
// one): y[n, o, p] = tmp[o, n P + p] + bias[o] (bias may be null).
template <class T>
void from_gemm_layout(const T* tmp, const T* bias, std::int64_t nb, std::int64_t o_n,
                      std::int64_t p_n, T* y) {
  const std::int64_t len = nb * p_n;
  if constexpr (kHostKernels) {
    Kokkos::parallel_for(
        "distop::conv_from_gemm_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t o = w % o_n;
          const T* src = tmp + o * len + (w / o_n) * p_n;
          T* dst = y + w * p_n;
          const T b = bias ? bias[o] : T(0);
          for (std::int64_t p = 0; p < p_n; ++p) dst[p] = src[p] + b;
        });
  } else {
    Kokkos::parallel_for(
        "distop::conv_from_gemm_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n * p_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t p = w % p_n;
          const std::int64_t o = (w / p_n) % o_n;
          y[w] = tmp[o * len + (w / (p_n * o_n)) * p_n + p] + (bias ? bias[o] : T(0));
        });
  }
}

// tmp[o, n P + p] = dy[n, o, p]
template <class T>
void to_gemm_layout(const T* dy, std::int64_t nb, std::int64_t o_n, std::int64_t p_n, T* tmp) {
  const std::int64_t len = nb * p_n;
  if constexpr (kHostKernels) {
    Kokkos::parallel_for(
        "distop::conv_to_gemm_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const T* src = dy + w * p_n;
          T* dst = tmp + (w % o_n) * len + (w / o_n) * p_n;
          for (std::int64_t p = 0; p < p_n; ++p) dst[p] = src[p];
        });
  } else {
    Kokkos::parallel_for(
        "distop::conv_to_gemm_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n * p_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const std::int64_t p = w % p_n;
          const std::int64_t o = (w / p_n) % o_n;
          tmp[o * len + (w / (p_n * o_n)) * p_n + p] = dy[w];
        });
  }
}

// y[n, o, p] += bias[o] for the nb samples of y starting at y.
template <class T>
void add_bias(T* y, const T* bias, std::int64_t nb, std::int64_t o_n, std::int64_t p_n) {
  if constexpr (kHostKernels) {
    Kokkos::parallel_for(
        "distop::conv_bias", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n),
        KOKKOS_LAMBDA(std::int64_t w) {
          const T b = bias[w % o_n];
          T* yr = y + w * p_n;
          for (std::int64_t p = 0; p < p_n; ++p) yr[p] += b;
        });
  } else {
    Kokkos::parallel_for(
        "distop::conv_bias", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n * p_n),
        KOKKOS_LAMBDA(std::int64_t w) { y[w] += bias[(w / p_n) % o_n]; });
  }
}

// dw[o, k] = beta dw[o, k] + dwt[k, o] for dw [O, K]; dw is not read when beta is 0.
template <class T>
void add_transposed(const T* dwt, std::int64_t o_n, std::int64_t k_n, T beta, T* dw) {
  Kokkos::parallel_for(
      "distop::conv_add_transposed", Kokkos::RangePolicy<ExecSpace>(0, o_n * k_n),
      KOKKOS_LAMBDA(std::int64_t w) {
        const T v = dwt[(w % k_n) * o_n + w / k_n];
        dw[w] = beta == T(0) ? v : beta * dw[w] + v;
      });
}

// ---------------------------------------------------------------------------------------------
// The row-folded im2col ("bands"), on the host, for a stride of 1 along axis 1 (the height of a
// 2-D convolution). The plain im2col matrix repeats every input row k[1] times, once per kernel
// row j1; the band matrix R holds each input row once, and the product over the kernel rows is
// k[1] GEMMs over shifted column blocks of R:
//   R [Kb = C k0 k2 rows (c, j0, j2), columns (i1p, n, o0, o2)], i1p in [0, out1 + (k1 - 1) d1)
//     R[(c, j0, j2), (i1p, n, o0, o2)] = x[n, c, o0 s0 - off0 + j0 d0, i1p - off1,
//                                          o2 s2 - off2 + j2 d2]   (zero outside x)
//   Ytmp [O, columns (o1, n, o0, o2)] = sum_j1 Wr_j1 [O, Kb] R[:, from column j1 d1 slot on]
// with slot = nb out0 out2 columns per value of i1p, since the rows i1p = o1 + j1 d1 of output
// rows o1 = 0 .. out1 - 1 are out1 consecutive slots. R is k[1] times smaller than the im2col
// matrix (fewer, equally long runs to copy and add back), and the k[1] narrower GEMMs run at
// least as fast as the one wide one (OpenBLAS: 85 against 64 GFLOP/s for LeNet's conv2). Measured
// faster on every layer of bench_conv (LeNet's conv1 and conv2 by 1.3-1.5x, a 64-channel 56 x 56
// layer by 5-10 %), so the host kernels take it wherever it applies.

ConvMethod g_conv_method = ConvMethod::automatic;

bool use_bands(const Geo& g) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    return g_conv_method != ConvMethod::im2col && !g.pointwise && g.s[1] == 1 && g.k[1] >= 2;
  }
}

// The direct kernels (conv_direct.hpp): 1-D and 2-D windows of stride 1 (or a single output
// along an axis), on a CPU they have vectors for. automatic takes them for few channels and a
// single-threaded host (they run on the calling thread; a threaded BLAS runs the GEMM forms on
// every core).
enum class Pass { forward, input, weight };

detail::DirectGeo direct_geo(const Geo& g) {
  return {g.in[1], g.in[2],  g.out[1], g.out[2], g.k[1],
          g.k[2],  g.dil[1], g.dil[2], g.off[1], g.off[2]};
}

template <class T>
bool use_direct(const Geo& g, std::int64_t c, std::int64_t o, Pass pass) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (g_conv_method == ConvMethod::im2col || g_conv_method == ConvMethod::bands) return false;
    // The kernels have no first of three axes: a 3-D window fits only where that axis is one
    // output reading the one input entry (an offset there would read padding instead).
    const bool fits = !g.pointwise && g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 &&
                      g.off[0] == 0 && (g.s[1] == 1 || g.out[1] == 1) &&
                      (g.s[2] == 1 || g.out[2] == 1) && host_simd_bytes() != 0;
    if (!fits) return false;
    // Their scratch (kept per thread) holds one sample's padded planes of every channel, input
    // and output: within kMaxScratchBytes, as the GEMM forms' (a 1024 x 1024 image with 3 -> 16
    // channels, 76 MiB, takes the bands).
    if (detail::direct_conv_scratch_bytes(direct_geo(g), c, o, sizeof(T)) > kMaxScratchBytes)
      return false;
    if (g_conv_method == ConvMethod::direct) return true;
    static const bool one_thread = Kokkos::DefaultHostExecutionSpace().concurrency() == 1;
    if (!one_thread || std::min(c, o) > kDirectMaxChannels) return false;
    // The weight gradient's tiles sweep a sample's planes once per input channel and kernel row:
    // past kDirectMaxChannels channels on both sides the GEMM forms win (measured: 32 -> 64
    // channels on 14 x 14, 0.8 of the bands' speed).
    if (pass == Pass::weight && std::max(c, o) > kDirectMaxChannels) return false;
    // The input gradient's tiles block the input channels, so with fewer than 4 of them (a
    // first layer's) they load about one vector per FMA, and the GEMM forms win.
    return pass != Pass::input || c >= 4;
  }
}

// The frames a forward pass kept for the direct weight gradient, when kept holds them for this
// geometry and batch; else null (the weight gradient pads x itself).
template <class T>
const T* kept_frames(const ConvColumns<T>* kept, const detail::DirectGeo& g, std::int64_t n,
                     std::int64_t c) {
  if (!kept || !kept->frames) return nullptr;
  return kept->data.numel() == n * detail::direct_conv_frame_entries<T>(g, c) ? kept->data.data()
                                                                              : nullptr;
}

struct BandDims {
  std::int64_t kb;     // rows of R: C k0 k2
  std::int64_t h;      // band rows i1p: out1 + (k1 - 1) d1
  std::int64_t slot;   // columns per band row: nb out0 out2
  std::int64_t cols;   // h slot
  std::int64_t block;  // columns of one GEMM: out1 slot
};

BandDims band_dims(const Geo& g, std::int64_t c, std::int64_t nb) {
  BandDims d{};
  d.kb = c * g.k[0] * g.k[2];
  d.h = g.out[1] + (g.k[1] - 1) * g.dil[1];
  d.slot = nb * g.out[0] * g.out[2];
  d.cols = d.h * d.slot;
  d.block = g.out[1] * d.slot;
  return d;
}

// R from the nb samples of x [nb, C, in...] starting at x: a work item per row of R.
template <class T>
void band_im2col(const T* x, std::int64_t nb, std::int64_t channels, const Geo& g,
                 const BandDims& d, T* r) {
  Kokkos::parallel_for(
      "distop::conv_bands", Kokkos::RangePolicy<ExecSpace>(0, d.kb), KOKKOS_LAMBDA(std::int64_t q) {
        const std::int64_t j2 = q % g.k[2];
        const std::int64_t j0 = (q / g.k[2]) % g.k[0];
        const std::int64_t ch = q / (g.k[2] * g.k[0]);
        const std::int64_t m = g.out[2], s2 = g.s[2];
        const std::int64_t b = j2 * g.dil[2] - g.off[2];
        std::int64_t lo = 0, hi = 0;
        valid_range(b, s2, g.in[2], m, lo, hi);
        T* dst = r + q * d.cols;
        for (std::int64_t i1p = 0; i1p < d.h; ++i1p) {
          const std::int64_t i1 = i1p - g.off[1];
          const bool in1 = i1 >= 0 && i1 < g.in[1];
          for (std::int64_t nl = 0; nl < nb; ++nl) {
            const T* xs = x + (nl * channels + ch) * g.in_n;
            for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0, dst += m) {
              const std::int64_t i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
              const bool inside = in1 && i0 >= 0 && i0 < g.in[0];
              read_run(dst, inside ? xs + (i0 * g.in[1] + i1) * g.in[2] : nullptr, m, lo, hi, b,
                       s2);
            }
          }
        }
      });
}

// dx = beta dx + the adjoint of band_im2col applied to dR: a work item per (sample, channel)
// plane of dx, which gathers the runs of dR that were read from it (no two work items write the
// same entry).
template <class T>
void band_col2im(const T* dr, std::int64_t nb, std::int64_t channels, const Geo& g,
                 const BandDims& d, T beta, T* dx) {
  Kokkos::parallel_for(
      "distop::conv_bands_adjoint", Kokkos::RangePolicy<ExecSpace>(0, nb * channels),
      KOKKOS_LAMBDA(std::int64_t w) {
        const std::int64_t ch = w % channels;
        const std::int64_t nl = w / channels;
        T* dxs = dx + w * g.in_n;
        scale_or_zero_run(dxs, g.in_n, beta);
        const std::int64_t m = g.out[2], s2 = g.s[2];
        for (std::int64_t j0 = 0; j0 < g.k[0]; ++j0) {
          for (std::int64_t j2 = 0; j2 < g.k[2]; ++j2) {
            const std::int64_t q = (ch * g.k[0] + j0) * g.k[2] + j2;
            const std::int64_t b = j2 * g.dil[2] - g.off[2];
            std::int64_t lo = 0, hi = 0;
            valid_range(b, s2, g.in[2], m, lo, hi);
            for (std::int64_t i1p = 0; i1p < d.h; ++i1p) {
              const std::int64_t i1 = i1p - g.off[1];
              if (i1 < 0 || i1 >= g.in[1]) continue;
              const T* src = dr + q * d.cols + (i1p * nb + nl) * g.out[0] * m;
              for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0, src += m) {
                const std::int64_t i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
                if (i0 < 0 || i0 >= g.in[0]) continue;
                T* dst = dxs + (i0 * g.in[1] + i1) * g.in[2];
                add_back_run(dst, src, lo, hi, b, s2);
              }
            }
          }
        }
      });
}

// Wr [k1][O, Kb] from w [O, C, k0, k1, k2]: the weights of kernel row j1, columns (c, j0, j2). A
// work item per (o, c), its taps in loops (no divisions per entry).
template <class T>
void band_weights(const T* w, std::int64_t o_n, std::int64_t channels, const Geo& g, T* wr) {
  const std::int64_t kb = channels * g.k[0] * g.k[2];
  Kokkos::parallel_for(
      "distop::conv_band_weights", Kokkos::RangePolicy<ExecSpace>(0, o_n * channels),
      KOKKOS_LAMBDA(std::int64_t co) {
        const std::int64_t c = co % channels, o = co / channels;
        const T* src = w + co * g.taps;  // w[o, c, ...] in (j0, j1, j2) order
        for (std::int64_t j0 = 0; j0 < g.k[0]; ++j0)
          for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1) {
            T* dst = wr + (j1 * o_n + o) * kb + (c * g.k[0] + j0) * g.k[2];
            for (std::int64_t j2 = 0; j2 < g.k[2]; ++j2) dst[j2] = *src++;
          }
      });
}

// dw = beta dw + dWr [k1][O, Kb] (the gradient in band_weights' layout) in w's layout.
template <class T>
void add_band_weights(const T* dwr, std::int64_t o_n, std::int64_t channels, const Geo& g, T beta,
                      T* dw) {
  const std::int64_t kb = channels * g.k[0] * g.k[2];
  Kokkos::parallel_for(
      "distop::conv_band_weights_adjoint", Kokkos::RangePolicy<ExecSpace>(0, o_n * channels),
      KOKKOS_LAMBDA(std::int64_t co) {
        const std::int64_t c = co % channels, o = co / channels;
        T* dst = dw + co * g.taps;
        for (std::int64_t j0 = 0; j0 < g.k[0]; ++j0)
          for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1) {
            const T* src = dwr + (j1 * o_n + o) * kb + (c * g.k[0] + j0) * g.k[2];
            for (std::int64_t j2 = 0; j2 < g.k[2]; ++j2, ++dst)
              *dst = beta == T(0) ? src[j2] : beta * *dst + src[j2];
          }
      });
}

// y[n, o, o0, o1, o2] = tmp[o, ((o1 nb + n) out0 + o0) out2 + o2] + bias[o] (bias may be null):
// from the band GEMMs' column order to y's, for the nb samples of y starting at y.
template <class T>
void from_band_layout(const T* tmp, const T* bias, std::int64_t nb, std::int64_t o_n, const Geo& g,
                      T* y) {
  const std::int64_t m = g.out[2], cols = g.out[1] * nb * g.out[0] * m;
  Kokkos::parallel_for(
      "distop::conv_from_band_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n),
      KOKKOS_LAMBDA(std::int64_t w) {
        const std::int64_t o = w % o_n, nl = w / o_n;
        const T b = bias ? bias[o] : T(0);
        T* dst = y + w * g.out_n;
        for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
          for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1, dst += m) {
            const T* src = tmp + o * cols + ((o1 * nb + nl) * g.out[0] + o0) * m;
            for (std::int64_t q = 0; q < m; ++q) dst[q] = src[q] + b;
          }
      });
}

// tmp[o, ((o1 nb + n) out0 + o0) out2 + o2] = dy[n, o, o0, o1, o2]
template <class T>
void to_band_layout(const T* dy, std::int64_t nb, std::int64_t o_n, const Geo& g, T* tmp) {
  const std::int64_t m = g.out[2], cols = g.out[1] * nb * g.out[0] * m;
  Kokkos::parallel_for(
      "distop::conv_to_band_layout", Kokkos::RangePolicy<ExecSpace>(0, nb * o_n),
      KOKKOS_LAMBDA(std::int64_t w) {
        const std::int64_t o = w % o_n, nl = w / o_n;
        const T* src = dy + w * g.out_n;
        for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0)
          for (std::int64_t o1 = 0; o1 < g.out[1]; ++o1, src += m) {
            T* dst = tmp + o * cols + ((o1 * nb + nl) * g.out[0] + o0) * m;
            copy_run(dst, src, m);
          }
      });
}

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

// Samples per chunk (see kMinColumns).
std::int64_t chunk_samples(std::int64_t n, std::int64_t rows_k, std::int64_t p, std::size_t elem) {
  std::int64_t nb =
      std::clamp<std::int64_t>((kMinColumns + p - 1) / p, 1, std::max<std::int64_t>(n, 1));
  const std::int64_t per_sample = rows_k * p * static_cast<std::int64_t>(elem);
  nb = std::min(
      nb, std::max<std::int64_t>(1, kMaxScratchBytes / std::max<std::int64_t>(per_sample, 1)));
  return nb;
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

// The band forms of the three passes (see band_im2col). Chunks of nb samples as in the im2col
// forms; the band matrices of the whole batch are kept for the weight gradient within
// kMaxKeptColumnsBytes.
template <class T>
void band_forward(const T* xp, const T* wp, const T* bp, std::int64_t n, std::int64_t c,
                  std::int64_t o, const Geo& g, std::int64_t nb, T* yp, ConvColumns<T>* keep) {
  const BandDims full = band_dims(g, c, nb);
  const std::int64_t per_sample = full.kb * full.h * g.out[0] * g.out[2];
  const bool kept =
      keep && per_sample * n * static_cast<std::int64_t>(sizeof(T)) <= kMaxKeptColumnsBytes;
  if (kept) {
    keep->data = Tensor<T>::uninitialized(Shape{per_sample * n}, "distop::conv columns");
    keep->samples_per_chunk = nb;
    keep->bands = true;
  }
  Scratch<T> scratch(kept ? 1 : per_sample * nb);
  Scratch<T> wr(g.k[1] * o * full.kb);
  Scratch<T> tmp(o * full.block);
  band_weights(wp, o, c, g, wr.data());
  for (std::int64_t s = 0; s < n; s += nb) {
    const std::int64_t m = std::min(nb, n - s);
    const BandDims d = band_dims(g, c, m);
    T* r = kept ? keep->data.data() + per_sample * s : scratch.data();
    band_im2col(xp + s * c * g.in_n, m, c, g, d, r);
    for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1)
      gemm_raw(Op::N, Op::N, o, d.block, d.kb, T(1), wr.data() + j1 * o * d.kb, d.kb,
               r + j1 * g.dil[1] * d.slot, d.cols, j1 == 0 ? T(0) : T(1), tmp.data(), d.block);
    from_band_layout(tmp.data(), bp, m, o, g, yp + s * o * g.out_n);
  }
}

template <class T>
void band_backward_input(const T* dyp, const T* wp, std::int64_t n, std::int64_t c, std::int64_t o,
                         const Geo& g, std::int64_t nb, T beta, T* dxp) {
  const BandDims full = band_dims(g, c, nb);
  Scratch<T> wr(g.k[1] * o * full.kb);
  Scratch<T> tmp(o * full.block);
  Scratch<T> dr(full.kb * full.cols);
  band_weights(wp, o, c, g, wr.data());
  for (std::int64_t s = 0; s < n; s += nb) {
    const std::int64_t m = std::min(nb, n - s);
    const BandDims d = band_dims(g, c, m);
    to_band_layout(dyp + s * o * g.out_n, m, o, g, tmp.data());
    // Kernel row 0 writes band rows [0, out1); the rows below start from zero.
    T* const r = dr.data();
    Kokkos::parallel_for(
        "distop::conv_bands_zero", Kokkos::RangePolicy<ExecSpace>(0, d.kb),
        KOKKOS_LAMBDA(std::int64_t q) {
          for (std::int64_t t = d.block; t < d.cols; ++t) r[q * d.cols + t] = T(0);
        });
    for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1) {
      const std::int64_t at = j1 * g.dil[1] * d.slot;
      // Columns [0, at) of this block's rows were written by earlier kernel rows or zeroed.
      gemm_raw(Op::T, Op::N, d.kb, d.block, o, T(1), wr.data() + j1 * o * d.kb, d.kb, tmp.data(),
               d.block, j1 == 0 ? T(0) : T(1), r + at, d.cols);
    }
    band_col2im(r, m, c, g, d, beta, dxp + s * c * g.in_n);
  }
}

template <class T>
void band_backward_weight(const T* dyp, const T* xp, std::int64_t n, std::int64_t c, std::int64_t o,
                          const Geo& g, std::int64_t nb, T beta, T* dwp,
                          const ConvColumns<T>* kept) {
  const BandDims full = band_dims(g, c, nb);
  const std::int64_t per_sample = full.kb * full.h * g.out[0] * g.out[2];
  const bool reuse = kept && !kept->empty() && kept->bands && !kept->frames &&
                     kept->samples_per_chunk == nb && kept->data.numel() == per_sample * n;
  Scratch<T> scratch(reuse ? 1 : per_sample * nb);
  Scratch<T> tmp(o * full.block);
  Scratch<T> dwr(g.k[1] * o * full.kb);
  for (std::int64_t s = 0; s < n; s += nb) {
    const std::int64_t m = std::min(nb, n - s);
    const BandDims d = band_dims(g, c, m);
    const T* r = reuse ? kept->data.data() + per_sample * s : scratch.data();
    if (!reuse) band_im2col(xp + s * c * g.in_n, m, c, g, d, scratch.data());
    to_band_layout(dyp + s * o * g.out_n, m, o, g, tmp.data());
    // dW_j1 [O, Kb] += tmp R[:, block j1]^T (OpenBLAS runs these narrow products faster in this
    // orientation than as dW^T with the long side as m: 87 against 72 GFLOP/s on LeNet's conv2).
    for (std::int64_t j1 = 0; j1 < g.k[1]; ++j1)
      gemm_raw(Op::N, Op::T, o, d.kb, d.block, T(1), tmp.data(), d.block,
               r + j1 * g.dil[1] * d.slot, d.cols, s == 0 ? T(0) : T(1), dwr.data() + j1 * o * d.kb,
               d.kb);
  }
  add_band_weights(dwr.data(), o, c, g, beta, dwp);
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
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
  const T* bp = bias.numel() > 0 ? bias.data() : nullptr;
  const T* xp = x.data();
  const T* wp = w.data();
  T* yp = y.data();
  if (geo.pointwise) {
    for (std::int64_t s = 0; s < n; ++s)
      gemm_raw(Op::N, Op::N, o, p, c, T(1), wp, c, xp + s * c * p, p, T(0), yp + s * o * p, p);
    if (bp) add_bias(yp, bp, n, o, p);
    return;
  }
  if (use_direct<T>(geo, c, o, Pass::forward)) {
    const detail::DirectGeo dg = direct_geo(geo);
    T* frames = nullptr;
    const std::int64_t entries = n * detail::direct_conv_frame_entries<T>(dg, c);
    if (keep && entries * static_cast<std::int64_t>(sizeof(T)) <= kMaxKeptColumnsBytes) {
      keep->data = Tensor<T>::uninitialized(Shape{entries}, "distop::conv frames");
      keep->frames = true;
      frames = keep->data.data();
    }
    detail::direct_conv_forward(xp, wp, bp, yp, n, c, o, dg, frames);
    return;
  }
  const std::int64_t nb = chunk_samples(n, rows_k, p, sizeof(T));
  // The band kernels read runs with host code: not instantiated for a device.
  if constexpr (kHostKernels) {
    if (use_bands(geo)) {
      band_forward(xp, wp, bp, n, c, o, geo, nb, yp, keep);
      return;
    }
  }
  // The chunk of samples from s on has its matrix at cols(s): in one kept tensor for the whole
  // batch, or else in one scratch buffer that every chunk reuses.
  const bool kept =
      keep && rows_k * n * p * static_cast<std::int64_t>(sizeof(T)) <= kMaxKeptColumnsBytes;
  if (kept) {
    keep->data = Tensor<T>::uninitialized(Shape{rows_k * n * p}, "distop::conv columns");
    keep->samples_per_chunk = nb;
  }
  Scratch<T> scratch(kept ? 1 : rows_k * nb * p);
  auto cols = [&](std::int64_t s) {
    return kept ? keep->data.data() + rows_k * p * s : scratch.data();
  };
  if (nb == 1) {
    for (std::int64_t s = 0; s < n; ++s) {
      im2col(xp + s * c * geo.in_n, 1, c, geo, cols(s));
      gemm_raw(Op::N, Op::N, o, p, rows_k, T(1), wp, rows_k, cols(s), p, T(0), yp + s * o * p, p);
      if (bp) add_bias(yp + s * o * p, bp, 1, o, p);
    }
    return;
  }
  Scratch<T> tmp(o * nb * p);
  for (std::int64_t s = 0; s < n; s += nb) {
    const std::int64_t m = std::min(nb, n - s);
    im2col(xp + s * c * geo.in_n, m, c, geo, cols(s));
    gemm_raw(Op::N, Op::N, o, m * p, rows_k, T(1), wp, rows_k, cols(s), m * p, T(0), tmp.data(),
             m * p);
    from_gemm_layout(tmp.data(), bp, m, o, p, yp + s * o * p);
  }
}

template <class T>
void conv_backward_input(const Tensor<T>& dy, const Tensor<T>& w, T beta, Tensor<T>& dx,
                         const WindowGeometry& g) {
  constexpr const char* kOp = "conv_backward_input";
  const auto [n, c, o] = check_conv(kOp, g, dx, "dx", w, dy, "dy", false);
  if (n == 0) return;
  const Geo geo = padded(g);
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
  const T* dyp = dy.data();
  const T* wp = w.data();
  T* dxp = dx.data();
  if (geo.pointwise) {
    for (std::int64_t s = 0; s < n; ++s)
      gemm_raw(Op::T, Op::N, c, p, o, T(1), wp, c, dyp + s * o * p, p, beta, dxp + s * c * p, p);
    return;
  }
  if (use_direct<T>(geo, c, o, Pass::input)) {
    detail::direct_conv_backward_input(dyp, wp, beta, dxp, n, c, o, direct_geo(geo));
    return;
  }
  const std::int64_t nb = chunk_samples(n, rows_k, p, sizeof(T));
  // Host kernels only, as above.
  if constexpr (kHostKernels) {
    if (use_bands(geo)) {
      band_backward_input(dyp, wp, n, c, o, geo, nb, beta, dxp);
      return;
    }
  }
  Scratch<T> col(rows_k * nb * p);
  if (nb == 1) {
    for (std::int64_t s = 0; s < n; ++s) {
      gemm_raw(Op::T, Op::N, rows_k, p, o, T(1), wp, rows_k, dyp + s * o * p, p, T(0), col.data(),
               p);
      col2im(col.data(), 1, c, geo, beta, dxp + s * c * geo.in_n);
    }
    return;
  }
  Scratch<T> tmp(o * nb * p);
  for (std::int64_t s = 0; s < n; s += nb) {
    const std::int64_t m = std::min(nb, n - s);
    to_gemm_layout(dyp + s * o * p, m, o, p, tmp.data());
    gemm_raw(Op::T, Op::N, rows_k, m * p, o, T(1), wp, rows_k, tmp.data(), m * p, T(0), col.data(),
             m * p);
    col2im(col.data(), m, c, geo, beta, dxp + s * c * geo.in_n);
  }
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
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
  const T* dyp = dy.data();
  const T* xp = x.data();
  T* dwp = dw.data();
  if (use_direct<T>(geo, c, o, Pass::weight)) {
    detail::direct_conv_backward_weight(dyp, xp, beta, dwp, n, c, o, direct_geo(geo),
                                        kept_frames(kept, direct_geo(geo), n, c));
    return;
  }
  // Host kernels only, as above.
  if constexpr (kHostKernels) {
    if (use_bands(geo)) {
      band_backward_weight(dyp, xp, n, c, o, geo, chunk_samples(n, rows_k, p, sizeof(T)), beta, dwp,
                           kept);
      return;
    }
  }
  // BLAS runs this product faster with the long side as m (OpenBLAS: 15-40% on these shapes),
  // so the GEMMs accumulate dW^T [C taps, O] in scratch; one small transpose adds it to dw.
  Scratch<T> dwt(rows_k * o);
  if (geo.pointwise) {
    for (std::int64_t s = 0; s < n; ++s)
      gemm_raw(Op::N, Op::T, c, o, p, T(1), xp + s * c * p, p, dyp + s * o * p, p,
               s == 0 ? T(0) : T(1), dwt.data(), o);
  } else {
    const std::int64_t nb = chunk_samples(n, rows_k, p, sizeof(T));
    const bool reuse = kept && !kept->empty() && !kept->bands && !kept->frames &&
                       kept->samples_per_chunk == nb && kept->data.numel() == rows_k * n * p;
    Scratch<T> scratch(reuse ? 1 : rows_k * nb * p);
    // The chunk's im2col matrix: the forward pass's, or built here. (c by copy: Clang before 16
    // does not let a lambda name a structured binding of the enclosing function.)
    auto cols = [&, c = c](std::int64_t s, std::int64_t m) {
      if (reuse) return kept->data.data() + rows_k * p * s;
      im2col(xp + s * c * geo.in_n, m, c, geo, scratch.data());
      return scratch.data();
    };
    if (nb == 1) {
      for (std::int64_t s = 0; s < n; ++s)
        gemm_raw(Op::N, Op::T, rows_k, o, p, T(1), cols(s, 1), p, dyp + s * o * p, p,
                 s == 0 ? T(0) : T(1), dwt.data(), o);
    } else {
      Scratch<T> tmp(o * nb * p);
      for (std::int64_t s = 0; s < n; s += nb) {
        const std::int64_t m = std::min(nb, n - s);
        const T* col = cols(s, m);
        to_gemm_layout(dyp + s * o * p, m, o, p, tmp.data());
        gemm_raw(Op::N, Op::T, rows_k, o, m * p, T(1), col, m * p, tmp.data(), m * p,
                 s == 0 ? T(0) : T(1), dwt.data(), o);
      }
    }
  }
  add_transposed(dwt.data(), o, rows_k, beta, dwp);
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
  // The direct kernels in one pass over the samples where they take the weight gradient and, if
  // wanted, the input gradient: dy padded once for both, the bias summed on the way, x's frames
  // from the forward pass.
  if (grads.dw) {
    constexpr const char* kOp = "conv_backward";
    const auto [n, c, o] = check_conv(kOp, g, x, "x", *grads.dw, dy, "dy", true);
    if (grads.dx) check_conv(kOp, g, *grads.dx, "dx", w, dy, "dy", false);
    const Geo geo = padded(g);
    if (n > 0 && use_direct<T>(geo, c, o, Pass::weight) &&
        (!grads.dx || use_direct<T>(geo, c, o, Pass::input))) {
      if (grads.db)
        DISTOP_CHECK(grads.db->shape() == Shape{o}, kOp, "db is ", grads.db->shape().str(),
                     ", expected ", Shape{o}.str());
      const detail::DirectGeo dg = direct_geo(geo);
      detail::direct_conv_backward(
          dy.data(), x.data(), w.data(), grads.beta_x, grads.dx ? grads.dx->data() : nullptr,
          grads.beta_w, grads.dw->data(), grads.beta_b, grads.db ? grads.db->data() : nullptr, n, c,
          o, dg, kept_frames(kept, dg, n, c));
      return;
    }
  }
  if (grads.dw) conv_backward_weight(dy, x, grads.beta_w, *grads.dw, g, kept);
  if (grads.db) conv_backward_bias(dy, grads.beta_b, *grads.db);
  if (grads.dx) conv_backward_input(dy, w, grads.beta_x, *grads.dx, g);
}

void set_conv_method(ConvMethod method) { g_conv_method = method; }
ConvMethod conv_method() { return g_conv_method; }

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
