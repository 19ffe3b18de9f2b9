#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>

#include "../../core/scratch.hpp"
#include "../conv_internal.hpp"
#include "../gemm_raw.hpp"
#include "../window_ranges.hpp"
#include "conv_direct.hpp"
#include "distop/kernels/simd.hpp"
#include "fast_path.hpp"
#include "runs.hpp"

#if DISTOP_HOST_KERNELS

// The host fast paths of the convolution: the direct kernels (conv_direct.hpp) and the
// row-folded im2col ("bands"). conv.cpp calls host_fast_path::conv_* first; where they return
// false, the portable im2col forms (conv_im2col.cpp) run, whose im2col and col2im call
// host_fast_path::im2col and col2im (a work item per row of the matrix) first.

namespace distop::kernels {

namespace {

using conv_detail::chunk_samples;
using conv_detail::Geo;
using conv_detail::kMaxScratchBytes;
using detail::add_back_run;
using detail::add_run;
using detail::copy_run;
using detail::gemm_raw;
using detail::read_run;
using detail::scale_or_zero_run;
using ::distop::detail::Scratch;

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

bool use_bands(const Geo& g) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    return conv_method() != ConvMethod::im2col && !g.pointwise && g.s[1] == 1 && g.k[1] >= 2;
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
    if (conv_method() == ConvMethod::im2col || conv_method() == ConvMethod::bands) return false;
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
    if (conv_method() == ConvMethod::direct) return true;
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

// The runs of one row of an im2col-style matrix (im2col's, kBands false, or the band matrix R,
// kBands true), each out[2] entries long. Run (nl, o0, u) holds sample nl's outputs along the last
// axis at o0 and u, where u is the output row o1 (im2col) or the band row i1p (bands), and reads
// input row i0 = o0 s0 - off0 + j0 d0, i1 = u s1 - off1 + j1 d1 of the row's tap (the bands have
// s1 = 1 and j1 = 0: their kernel rows are shifts of R's columns). In the row the runs lie in the
// order (nl, o0, u) in im2col's matrix (its columns are (n, o0, o1, o2)) and (u, nl, o0) in R.

// The tap (channel, j0, j1, j2) of row r of an im2col-style matrix: rows ((ch k0 + j0) K1 + j1) k2
// + j2, with K1 = k1 in im2col's matrix and 1 in R (j1 = 0).
struct RowTap {
  std::int64_t ch, j0, j1, j2;
};
template <bool kBands>
RowTap row_tap(const Geo& g, std::int64_t r) {
  const std::int64_t k1 = kBands ? 1 : g.k[1];
  return {r / (g.k[2] * k1 * g.k[0]), (r / (g.k[2] * k1)) % g.k[0], (r / g.k[2]) % k1, r % g.k[2]};
}

// Calls f(nl, k, inside, at) for the runs of one row of tap t in the row's order: k the run's place
// in the row (in runs), at the offset of the input row it reads in its plane of x,
// (i0 in[1] + i1) in[2], where inside (else it reads padding); with kSample, only the runs of
// sample nl_only that read inside.
// The indices advance with the loops (no division per run: runs are short, an output row of often
// 10-30 entries), and the loops are inlined into the caller's work item.
template <bool kBands, bool kSample, class F>
[[gnu::always_inline]] inline void for_each_run(const Geo& g, const RowTap& t, std::int64_t nb,
                                                std::int64_t u_n, std::int64_t nl_only,
                                                const F& f) {
  const std::int64_t n_lo = kSample ? nl_only : 0, n_hi = kSample ? nl_only + 1 : nb;
  const std::int64_t i0_start = t.j0 * g.dil[0] - g.off[0];
  const std::int64_t i1_start = t.j1 * g.dil[1] - g.off[1];
  if constexpr (kBands) {
    for (std::int64_t u = 0; u < u_n; ++u) {
      const std::int64_t i1 = i1_start + u * g.s[1];
      const bool in1 = i1 >= 0 && i1 < g.in[1];
      if (kSample && !in1) continue;
      for (std::int64_t nl = n_lo; nl < n_hi; ++nl) {
        const std::int64_t k0 = (u * nb + nl) * g.out[0];
        for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0) {
          const std::int64_t i0 = i0_start + o0 * g.s[0];
          const bool inside = in1 && i0 >= 0 && i0 < g.in[0];
          if (!kSample || inside) f(nl, k0 + o0, inside, (i0 * g.in[1] + i1) * g.in[2]);
        }
      }
    }
  } else {
    for (std::int64_t nl = n_lo; nl < n_hi; ++nl)
      for (std::int64_t o0 = 0; o0 < g.out[0]; ++o0) {
        const std::int64_t i0 = i0_start + o0 * g.s[0];
        const bool in0 = i0 >= 0 && i0 < g.in[0];
        if (kSample && !in0) continue;
        const std::int64_t k0 = (nl * g.out[0] + o0) * u_n;
        for (std::int64_t u = 0; u < u_n; ++u) {
          const std::int64_t i1 = i1_start + u * g.s[1];
          const bool inside = in0 && i1 >= 0 && i1 < g.in[1];
          if (!kSample || inside) f(nl, k0 + u, inside, (i0 * g.in[1] + i1) * g.in[2]);
        }
      }
  }
}

// The matrix of the nb samples of x [nb, C, in...] starting at x (im2col's, u_n = out1, or R,
// u_n = its band rows): a work item per row, its runs written in order, each read from one input
// row (or zero). The tap is decoded once per row (64-bit divisions cost as much as copying a
// short run); its valid range along the last axis is the same for every run of the row.
template <bool kBands, class T>
void gather_rows(const char* name, const T* x, std::int64_t nb, std::int64_t channels, const Geo& g,
                 std::int64_t u_n, T* out) {
  const std::int64_t m = g.out[2], len = nb * g.out[0] * u_n * m;
  const std::int64_t rows = channels * g.k[0] * (kBands ? 1 : g.k[1]) * g.k[2];
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(std::int64_t r) {
        const RowTap t = row_tap<kBands>(g, r);
        const std::int64_t b = t.j2 * g.dil[2] - g.off[2];
        std::int64_t lo = 0, hi = 0;
        valid_range(b, g.s[2], g.in[2], m, lo, hi);
        T* dst = out + r * len;
        const T* xc = x + t.ch * g.in_n;
        // By value: copy_run's stores (bytes) may alias anything the loop reads through a
        // reference, which would then be reloaded for every run.
        const std::int64_t s2 = g.s[2], plane = channels * g.in_n;
        auto read = [ =, &dst ](std::int64_t nl, std::int64_t, bool inside, std::int64_t at)
            __attribute__((always_inline)) {
          read_run(dst, inside ? xc + nl * plane + at : nullptr, m, lo, hi, b, s2);
          dst += m;
        };
        for_each_run<kBands, false>(g, t, nb, u_n, 0, read);
      });
}

// dx = beta dx + the adjoint of gather_rows applied to the matrix in: a work item per (sample,
// channel) plane of dx, which walks the rows of its channel in order and adds each of the
// plane's runs (in the row's order) back to the input row it was read from (no two work items
// write the same entry).
template <bool kBands, class T>
void scatter_rows(const char* name, const T* in, std::int64_t nb, std::int64_t channels,
                  const Geo& g, std::int64_t u_n, T beta, T* dx) {
  const std::int64_t m = g.out[2], len = nb * g.out[0] * u_n * m;
  const std::int64_t row_taps = g.k[0] * (kBands ? 1 : g.k[1]) * g.k[2];
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(0, nb * channels), KOKKOS_LAMBDA(std::int64_t w) {
        const std::int64_t ch = w % channels;
        const std::int64_t nl = w / channels;
        T* dxs = dx + w * g.in_n;
        scale_or_zero_run(dxs, g.in_n, beta);
        for (std::int64_t r = ch * row_taps; r < (ch + 1) * row_taps; ++r) {
          const RowTap t = row_tap<kBands>(g, r);
          const std::int64_t b = t.j2 * g.dil[2] - g.off[2];
          std::int64_t lo = 0, hi = 0;
          valid_range(b, g.s[2], g.in[2], m, lo, hi);
          const T* row = in + r * len;
          const std::int64_t s2 = g.s[2];
          auto add_back = [=](std::int64_t, std::int64_t k, bool, std::int64_t at)
              __attribute__((always_inline)) {
            add_back_run(dxs + at, row + k * m, lo, hi, b, s2);
          };
          for_each_run<kBands, true>(g, t, nb, u_n, nl, add_back);
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

// The band forms of the three passes (R: gather_rows<true>). Chunks of nb samples as in the im2col
// forms; the band matrices of the whole batch are kept for the weight gradient within
// conv_kept_columns_limit().
template <class T>
void band_forward(const T* xp, const T* wp, const T* bp, std::int64_t n, std::int64_t c,
                  std::int64_t o, const Geo& g, std::int64_t nb, T* yp, ConvColumns<T>* keep) {
  const BandDims full = band_dims(g, c, nb);
  const std::int64_t per_sample = full.kb * full.h * g.out[0] * g.out[2];
  const bool kept =
      keep && per_sample * n * static_cast<std::int64_t>(sizeof(T)) <= conv_kept_columns_limit();
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
    gather_rows<true>("distop::conv_bands", xp + s * c * g.in_n, m, c, g, d.h, r);
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
    scatter_rows<true>("distop::conv_bands_adjoint", r, m, c, g, d.h, beta, dxp + s * c * g.in_n);
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
    if (!reuse)
      gather_rows<true>("distop::conv_bands", xp + s * c * g.in_n, m, c, g, d.h, scratch.data());
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

namespace host_fast_path {

template <class T>
bool conv_forward(const T* xp, const T* wp, const T* bp, T* yp, std::int64_t n, std::int64_t c,
                  std::int64_t o, const Geo& geo, ConvColumns<T>* keep) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    if (use_direct<T>(geo, c, o, Pass::forward)) {
      const detail::DirectGeo dg = direct_geo(geo);
      T* frames = nullptr;
      const std::int64_t entries = n * detail::direct_conv_frame_entries<T>(dg, c);
      if (keep && entries * static_cast<std::int64_t>(sizeof(T)) <= conv_kept_columns_limit()) {
        keep->data = Tensor<T>::uninitialized(Shape{entries}, "distop::conv frames");
        keep->frames = true;
        frames = keep->data.data();
      }
      detail::direct_conv_forward(xp, wp, bp, yp, n, c, o, dg, frames);
      return true;
    }
    if (!use_bands(geo)) return false;
    band_forward(xp, wp, bp, n, c, o, geo, chunk_samples(n, c * geo.taps, geo.out_n, sizeof(T)), yp,
                 keep);
    return true;
  }
}

template <class T>
bool conv_backward_input(const T* dyp, const T* wp, T beta, T* dxp, std::int64_t n, std::int64_t c,
                         std::int64_t o, const Geo& geo) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    if (use_direct<T>(geo, c, o, Pass::input)) {
      detail::direct_conv_backward_input(dyp, wp, beta, dxp, n, c, o, direct_geo(geo));
      return true;
    }
    if (!use_bands(geo)) return false;
    band_backward_input(dyp, wp, n, c, o, geo, chunk_samples(n, c * geo.taps, geo.out_n, sizeof(T)),
                        beta, dxp);
    return true;
  }
}

template <class T>
bool conv_backward_weight(const T* dyp, const T* xp, T beta, T* dwp, std::int64_t n, std::int64_t c,
                          std::int64_t o, const Geo& geo, const ConvColumns<T>* kept) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    if (use_direct<T>(geo, c, o, Pass::weight)) {
      detail::direct_conv_backward_weight(dyp, xp, beta, dwp, n, c, o, direct_geo(geo),
                                          kept_frames(kept, direct_geo(geo), n, c));
      return true;
    }
    if (!use_bands(geo)) return false;
    band_backward_weight(dyp, xp, n, c, o, geo,
                         chunk_samples(n, c * geo.taps, geo.out_n, sizeof(T)), beta, dwp, kept);
    return true;
  }
}

template <class T>
bool conv_backward(const T* dyp, const T* xp, const T* wp, const ConvGradients<T>& grads,
                   std::int64_t n, std::int64_t c, std::int64_t o, const Geo& geo,
                   const ConvColumns<T>* kept) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    // The direct kernels in one pass over the samples where they take the weight gradient and,
    // if wanted, the input gradient: dy padded once for both, the bias summed on the way, x's
    // frames from the forward pass.
    if (!grads.dw || n == 0 || !use_direct<T>(geo, c, o, Pass::weight) ||
        (grads.dx && !use_direct<T>(geo, c, o, Pass::input)))
      return false;
    if (grads.db)
      DISTOP_CHECK(grads.db->shape() == Shape{o}, "conv_backward", "db is ",
                   grads.db->shape().str(), ", expected ", Shape{o}.str());
    const detail::DirectGeo dg = direct_geo(geo);
    detail::direct_conv_backward(dyp, xp, wp, grads.beta_x, grads.dx ? grads.dx->data() : nullptr,
                                 grads.beta_w, grads.dw->data(), grads.beta_b,
                                 grads.db ? grads.db->data() : nullptr, n, c, o, dg,
                                 kept_frames(kept, dg, n, c));
    return true;
  }
}

template <class T>
bool im2col(const T* x, std::int64_t nb, std::int64_t channels, const Geo& g, T* col) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    gather_rows<false>("distop::im2col", x, nb, channels, g, g.out[1], col);
    return true;
  }
}

template <class T>
bool col2im(const T* col, std::int64_t nb, std::int64_t channels, const Geo& g, T beta, T* dx) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    scatter_rows<false>("distop::col2im", col, nb, channels, g, g.out[1], beta, dx);
    return true;
  }
}

#define DISTOP_INSTANTIATE_HOST_CONV(T)                                                            \
  template bool conv_forward(const T*, const T*, const T*, T*, std::int64_t, std::int64_t,         \
                             std::int64_t, const Geo&, ConvColumns<T>*);                           \
  template bool conv_backward_input(const T*, const T*, T, T*, std::int64_t, std::int64_t,         \
                                    std::int64_t, const Geo&);                                     \
  template bool conv_backward_weight(const T*, const T*, T, T*, std::int64_t, std::int64_t,        \
                                     std::int64_t, const Geo&, const ConvColumns<T>*);             \
  template bool conv_backward(const T*, const T*, const T*, const ConvGradients<T>&, std::int64_t, \
                              std::int64_t, std::int64_t, const Geo&, const ConvColumns<T>*);      \
  template bool im2col(const T*, std::int64_t, std::int64_t, const Geo&, T*);                      \
  template bool col2im(const T*, std::int64_t, std::int64_t, const Geo&, T, T*);
DISTOP_INSTANTIATE_HOST_CONV(float)
DISTOP_INSTANTIATE_HOST_CONV(double)
#undef DISTOP_INSTANTIATE_HOST_CONV

}  // namespace host_fast_path

}  // namespace distop::kernels

#endif  // DISTOP_HOST_KERNELS
