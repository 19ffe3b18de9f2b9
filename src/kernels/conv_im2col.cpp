#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <limits>

#include "../core/scratch.hpp"
#include "conv_internal.hpp"
#include "gemm_raw.hpp"
#include "host/fast_path.hpp"

// The portable forms of the convolution: im2col (or the input itself for a 1x1 window) and GEMM.
// im2col and col2im have a host fast path (a work item per row of the matrix, whose inner loops
// are runs: host_fast_path::im2col and col2im, called first); the layout kernels have one form.

namespace distop::kernels::conv_detail {

namespace {

using detail::gemm_raw;
using ::distop::detail::Scratch;

// The device forms below give each GPU thread one entry, over a 2-D or 3-D range whose last index
// runs along memory (Iterate::Right: on a GPU neighbouring threads take neighbouring entries, on
// the host the last index is the inner loop of each tile, so the decoding of the outer indices is
// loop-invariant there). Indices are int32 when every offset fits (checked once on the host: a
// GPU divides 32-bit integers several times faster than 64-bit ones, and so does a CPU).
template <class I, int R>
using Range = Kokkos::MDRangePolicy<ExecSpace,
                                    Kokkos::Rank<R, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                                    Kokkos::IndexType<I>>;

// True when every offset below `bound` fits an int32.
inline bool fits_int32(std::int64_t bound) {
  return bound <= static_cast<std::int64_t>(std::numeric_limits<std::int32_t>::max());
}

// Geo in the index type of a device kernel.
template <class I>
struct GeoI {
  I in[3], out[3], k[3], s[3], dil[3], off[3];
  I taps, in_n, out_n;
  explicit GeoI(const Geo& g)
      : taps(static_cast<I>(g.taps)), in_n(static_cast<I>(g.in_n)), out_n(static_cast<I>(g.out_n)) {
    for (int a = 0; a < 3; ++a) {
      in[a] = static_cast<I>(g.in[a]);
      out[a] = static_cast<I>(g.out[a]);
      k[a] = static_cast<I>(g.k[a]);
      s[a] = static_cast<I>(g.s[a]);
      dil[a] = static_cast<I>(g.dil[a]);
      off[a] = static_cast<I>(g.off[a]);
    }
  }
};

// The device form of im2col: a thread per entry of col, over (row r, sample and output position
// along axes 0 and 1, output position along axis 2).
template <class I, class T>
void im2col_device(const T* x, std::int64_t nb, std::int64_t channels, const Geo& geo, T* col) {
  const GeoI<I> g(geo);
  const I len = static_cast<I>(nb * geo.out_n), rows_k = static_cast<I>(channels * geo.taps);
  const I ch_n = static_cast<I>(channels);
  const I q_n = static_cast<I>(nb * geo.out[0] * geo.out[1]);
  Kokkos::parallel_for(
      "distop::im2col", Range<I, 3>({0, 0, 0}, {rows_k, q_n, g.out[2]}),
      KOKKOS_LAMBDA(I r, I q, I o2) {
        const I j2 = r % g.k[2];
        const I j1 = (r / g.k[2]) % g.k[1];
        const I j0 = (r / (g.k[2] * g.k[1])) % g.k[0];
        const I ch = r / g.taps;
        const I o1 = q % g.out[1];
        const I o0 = (q / g.out[1]) % g.out[0];
        const I nl = q / (g.out[1] * g.out[0]);
        const I i0 = o0 * g.s[0] - g.off[0] + j0 * g.dil[0];
        const I i1 = o1 * g.s[1] - g.off[1] + j1 * g.dil[1];
        const I i2 = o2 * g.s[2] - g.off[2] + j2 * g.dil[2];
        const bool inside =
            i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
        col[r * len + q * g.out[2] + o2] =
            inside ? x[(nl * ch_n + ch) * g.in_n + (i0 * g.in[1] + i1) * g.in[2] + i2] : T(0);
      });
}

// The device form of col2im: a thread per entry of dx, over (sample, channel and input position
// along axis 0, input position along axis 1, along axis 2), gathering the columns that read it.
template <class I, class T>
void col2im_device(const T* col, std::int64_t nb, std::int64_t channels, const Geo& geo, T beta,
                   T* dx) {
  const GeoI<I> g(geo);
  const I len = static_cast<I>(nb * geo.out_n), ch_n = static_cast<I>(channels);
  const I t_n = static_cast<I>(nb * channels * geo.in[0]);
  Kokkos::parallel_for(
      "distop::col2im", Range<I, 3>({0, 0, 0}, {t_n, g.in[1], g.in[2]}),
      KOKKOS_LAMBDA(I t, I i1, I i2) {
        const I i0 = t % g.in[0];
        const I ch = (t / g.in[0]) % ch_n;
        const I nl = t / (g.in[0] * ch_n);
        T acc = T(0);
        for (I j0 = 0; j0 < g.k[0]; ++j0) {
          const I t0 = i0 + g.off[0] - j0 * g.dil[0];
          const I q0 = g.s[0] == 1 ? t0 : t0 / g.s[0];
          if (t0 < 0 || (g.s[0] != 1 && t0 % g.s[0] != 0) || q0 >= g.out[0]) continue;
          for (I j1 = 0; j1 < g.k[1]; ++j1) {
            const I t1 = i1 + g.off[1] - j1 * g.dil[1];
            const I q1 = g.s[1] == 1 ? t1 : t1 / g.s[1];
            if (t1 < 0 || (g.s[1] != 1 && t1 % g.s[1] != 0) || q1 >= g.out[1]) continue;
            const T* src = col + (ch * g.taps + (j0 * g.k[1] + j1) * g.k[2]) * len + nl * g.out_n +
                           (q0 * g.out[1] + q1) * g.out[2];
            for (I j2 = 0; j2 < g.k[2]; ++j2, src += len) {
              const I t2 = i2 + g.off[2] - j2 * g.dil[2];
              const I q2 = g.s[2] == 1 ? t2 : t2 / g.s[2];
              if (t2 < 0 || (g.s[2] != 1 && t2 % g.s[2] != 0) || q2 >= g.out[2]) continue;
              acc += src[q2];
            }
          }
        }
        T* d = dx + (t * g.in[1] + i1) * g.in[2] + i2;
        *d = beta == T(0) ? acc : beta * *d + acc;
      });
}

// col [C taps, nb P] (row (c, j), column (sample, output position)) from the nb samples of x
// [nb, C, in...] starting at x; zero where a tap reads outside the input.
template <class T>
void im2col(const T* x, std::int64_t nb, std::int64_t channels, const Geo& g, T* col) {
  if (host_fast_path::im2col(x, nb, channels, g, col)) return;
  const std::int64_t len = nb * g.out_n;  // row length of col
  const std::int64_t rows_k = channels * g.taps;
  if (fits_int32(std::max(rows_k * len, nb * channels * g.in_n))) {
    im2col_device<std::int32_t>(x, nb, channels, g, col);
  } else {
    im2col_device<std::int64_t>(x, nb, channels, g, col);
  }
}

// dx = beta dx + col2im(col) for the nb samples of dx [nb, C, in...] starting at dx: the adjoint
// of im2col. Each work item owns entries of dx and gathers the columns that read them, so no two
// work items write the same entry. When beta is 0, dx is not read.
template <class T>
void col2im(const T* col, std::int64_t nb, std::int64_t channels, const Geo& g, T beta, T* dx) {
  if (host_fast_path::col2im(col, nb, channels, g, beta, dx)) return;
  const std::int64_t len = nb * g.out_n;
  if (fits_int32(std::max(channels * g.taps * len, nb * channels * g.in_n))) {
    col2im_device<std::int32_t>(col, nb, channels, g, beta, dx);
  } else {
    col2im_device<std::int64_t>(col, nb, channels, g, beta, dx);
  }
}

// The layouts [nb, O, P] (a block of y or dy) and [O, nb P] (the GEMM's when nb samples share
// one): y[n, o, p] = tmp[o, n P + p] + bias[o] (bias may be null).
template <class T>
void from_gemm_layout(const T* tmp, const T* bias, std::int64_t nb, std::int64_t o_n,
                      std::int64_t p_n, T* y) {
  const std::int64_t len = nb * p_n;
  Kokkos::parallel_for(
      "distop::conv_from_gemm_layout", Range<std::int64_t, 3>({0, 0, 0}, {nb, o_n, p_n}),
      KOKKOS_LAMBDA(std::int64_t n, std::int64_t o, std::int64_t p) {
        y[(n * o_n + o) * p_n + p] = tmp[o * len + n * p_n + p] + (bias ? bias[o] : T(0));
      });
}

// tmp[o, n P + p] = dy[n, o, p]
template <class T>
void to_gemm_layout(const T* dy, std::int64_t nb, std::int64_t o_n, std::int64_t p_n, T* tmp) {
  const std::int64_t len = nb * p_n;
  Kokkos::parallel_for(
      "distop::conv_to_gemm_layout", Range<std::int64_t, 3>({0, 0, 0}, {nb, o_n, p_n}),
      KOKKOS_LAMBDA(std::int64_t n, std::int64_t o, std::int64_t p) {
        tmp[o * len + n * p_n + p] = dy[(n * o_n + o) * p_n + p];
      });
}

// y[n, o, p] += bias[o] for the nb samples of y starting at y.
template <class T>
void add_bias(T* y, const T* bias, std::int64_t nb, std::int64_t o_n, std::int64_t p_n) {
  Kokkos::parallel_for(
      "distop::conv_bias", Range<std::int64_t, 2>({0, 0}, {nb * o_n, p_n}),
      KOKKOS_LAMBDA(std::int64_t w, std::int64_t p) { y[w * p_n + p] += bias[w % o_n]; });
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

}  // namespace

template <class T>
void im2col_forward(const T* xp, const T* wp, const T* bp, T* yp, std::int64_t n, std::int64_t c,
                    std::int64_t o, const Geo& geo, ConvColumns<T>* keep) {
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
  if (geo.pointwise) {
    for (std::int64_t s = 0; s < n; ++s)
      gemm_raw(Op::N, Op::N, o, p, c, T(1), wp, c, xp + s * c * p, p, T(0), yp + s * o * p, p);
    if (bp) add_bias(yp, bp, n, o, p);
    return;
  }
  const std::int64_t nb = chunk_samples(n, rows_k, p, sizeof(T));
  // The chunk of samples from s on has its matrix at cols(s): in one kept tensor for the whole
  // batch, or else in one scratch buffer that every chunk reuses.
  const bool kept =
      keep && rows_k * n * p * static_cast<std::int64_t>(sizeof(T)) <= conv_kept_columns_limit();
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
void im2col_backward_input(const T* dyp, const T* wp, T beta, T* dxp, std::int64_t n,
                           std::int64_t c, std::int64_t o, const Geo& geo) {
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
  if (geo.pointwise) {
    for (std::int64_t s = 0; s < n; ++s)
      gemm_raw(Op::T, Op::N, c, p, o, T(1), wp, c, dyp + s * o * p, p, beta, dxp + s * c * p, p);
    return;
  }
  const std::int64_t nb = chunk_samples(n, rows_k, p, sizeof(T));
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
void im2col_backward_weight(const T* dyp, const T* xp, T beta, T* dwp, std::int64_t n,
                            std::int64_t c, std::int64_t o, const Geo& geo,
                            const ConvColumns<T>* kept) {
  const std::int64_t p = geo.out_n, rows_k = c * geo.taps;
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
    // The chunk's im2col matrix: the forward pass's, or built here.
    auto cols = [&](std::int64_t s, std::int64_t m) {
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

#define DISTOP_INSTANTIATE_IM2COL(T)                                                          \
  template void im2col_forward(const T*, const T*, const T*, T*, std::int64_t, std::int64_t,  \
                               std::int64_t, const Geo&, ConvColumns<T>*);                    \
  template void im2col_backward_input(const T*, const T*, T, T*, std::int64_t, std::int64_t,  \
                                      std::int64_t, const Geo&);                              \
  template void im2col_backward_weight(const T*, const T*, T, T*, std::int64_t, std::int64_t, \
                                       std::int64_t, const Geo&, const ConvColumns<T>*);
DISTOP_INSTANTIATE_IM2COL(float)
DISTOP_INSTANTIATE_IM2COL(double)
#undef DISTOP_INSTANTIATE_IM2COL

}  // namespace distop::kernels::conv_detail
