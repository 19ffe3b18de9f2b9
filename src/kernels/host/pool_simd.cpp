#include "pool_simd.hpp"

#include <cstdint>

#include "distop/kernels/simd.hpp"
#include "simd_target.hpp"

namespace distop::kernels::detail {

bool simd_max_pool_2() { return host_avx512(); }

#ifdef DISTOP_SIMD_X86

DISTOP_TARGET_BEGIN("avx512f")

namespace {

// (The zero-masked forms of a few intrinsics below, under an all-ones mask, are the plain ones:
// GCC 12's headers build the plain ones on an undefined vector and then warn about it.)
// The vector operations of one element type: V holds L values, I the L winners' tap numbers
// (2 q + j for input row q and column j of the window) and, at the end, their indices into x.
template <class T>
struct Lanes;

template <>
struct Lanes<float> {
  static constexpr int L = 16;
  using V = __m512;
  using M = __mmask16;
  static M first(std::int64_t n) { return n >= L ? M(0xFFFF) : static_cast<M>((1u << n) - 1u); }
  static V load(M k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, M k, V v) { _mm512_mask_storeu_ps(p, k, v); }
  // Entries 0, 2, .. 2L - 2 and 1, 3, .. 2L - 1 of the 2L values a then b.
  static V even(V a, V b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
  }
  static V odd(V a, V b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
  }
  // Lanes where u replaces the current v: !(u <= v) and v is not NaN.
  static M takes(V u, V v) {
    return static_cast<M>(_mm512_cmp_ps_mask(u, v, _CMP_NLE_UQ) &
                          _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q));
  }
  static V select(M k, V a, V b) { return _mm512_mask_blend_ps(k, a, b); }  // k ? b : a
  // Tap numbers in 32-bit lanes.
  using I = __m512i;
  static I taps(M k, int q) {  // 2 q + (k ? 1 : 0)
    return _mm512_mask_add_epi32(_mm512_set1_epi32(2 * q), k, _mm512_set1_epi32(2 * q),
                                 _mm512_set1_epi32(1));
  }
  static I select(M k, I a, I b) { return _mm512_mask_blend_epi32(k, a, b); }
  // argmax[i] = rows[t_i / 2] + 2 (ob + i) + t_i % 2 for the first len lanes.
  static void store_index(std::int64_t* out, M k, I t, __m512i rows, std::int64_t ob) {
    store_half<0>(out, k, t, rows, ob);
    if (k >> 8) store_half<1>(out, k, t, rows, ob);  // lanes 8-15 hold outputs
  }
  // Lanes 8 H .. 8 H + 7 (the extract takes its half as a constant).
  template <int H>
  static void store_half(std::int64_t* out, M k, I t, __m512i rows, std::int64_t ob) {
    const __m512i th =
        _mm512_maskz_cvtepi32_epi64(0xFF, _mm512_maskz_extracti64x4_epi64(0xFF, t, H));
    const __m512i row =
        _mm512_maskz_permutexvar_epi64(0xFF, _mm512_maskz_srli_epi64(0xFF, th, 1), rows);
    const __m512i col = _mm512_and_si512(th, _mm512_set1_epi64(1));
    const __m512i at = _mm512_add_epi64(
        _mm512_add_epi64(row, col), _mm512_add_epi64(_mm512_set1_epi64(2 * ob + 16 * H),
                                                     _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14)));
    _mm512_mask_storeu_epi64(out + 8 * H, static_cast<__mmask8>(k >> (8 * H)), at);
  }
};

template <>
struct Lanes<double> {
  static constexpr int L = 8;
  using V = __m512d;
  using M = __mmask8;
  static M first(std::int64_t n) { return n >= L ? M(0xFF) : static_cast<M>((1u << n) - 1u); }
  static V load(M k, const double* p) { return _mm512_maskz_loadu_pd(k, p); }
  static void store(double* p, M k, V v) { _mm512_mask_storeu_pd(p, k, v); }
  static V even(V a, V b) {
    return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), b);
  }
  static V odd(V a, V b) {
    return _mm512_permutex2var_pd(a, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), b);
  }
  static M takes(V u, V v) {
    return static_cast<M>(_mm512_cmp_pd_mask(u, v, _CMP_NLE_UQ) &
                          _mm512_cmp_pd_mask(v, v, _CMP_ORD_Q));
  }
  static V select(M k, V a, V b) { return _mm512_mask_blend_pd(k, a, b); }
  // Tap numbers in 64-bit lanes.
  using I = __m512i;
  static I taps(M k, int q) {
    return _mm512_mask_add_epi64(_mm512_set1_epi64(2 * q), k, _mm512_set1_epi64(2 * q),
                                 _mm512_set1_epi64(1));
  }
  static I select(M k, I a, I b) { return _mm512_mask_blend_epi64(k, a, b); }
  static void store_index(std::int64_t* out, M k, I t, __m512i rows, std::int64_t ob) {
    const __m512i row =
        _mm512_maskz_permutexvar_epi64(0xFF, _mm512_maskz_srli_epi64(0xFF, t, 1), rows);
    const __m512i col = _mm512_and_si512(t, _mm512_set1_epi64(1));
    const __m512i at = _mm512_add_epi64(
        _mm512_add_epi64(row, col),
        _mm512_add_epi64(_mm512_set1_epi64(2 * ob), _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14)));
    _mm512_mask_storeu_epi64(out, k, at);
  }
};

template <class T>
void row_2(const T* x, const std::int64_t* rows, int r_count, std::int64_t m, T* y,
           std::int64_t* argmax) {
  using A = Lanes<T>;
  constexpr int L = A::L;
  const __m512i row_v = _mm512_maskz_loadu_epi64(static_cast<__mmask8>((1u << r_count) - 1u), rows);
  for (std::int64_t ob = 0; ob < m; ob += L) {
    const std::int64_t len = m - ob < L ? m - ob : L;
    // The block's 2 len inputs of a row: the first L in a, the rest in b.
    const typename A::M ka = A::first(2 * len), kb = A::first(2 * len - L > 0 ? 2 * len - L : 0);
    typename A::V best{};
    typename A::I won{};
    for (int q = 0; q < r_count; ++q) {
      const T* src = x + rows[q] + 2 * ob;
      const typename A::V a = A::load(ka, src), b = A::load(kb, src + L);
      const typename A::V e = A::even(a, b), o = A::odd(a, b);
      // The row's max, column 0 then column 1, then merged into the block's running max.
      const typename A::M t1 = A::takes(o, e);
      const typename A::V v = A::select(t1, e, o);
      const typename A::I at = A::taps(t1, q);
      if (q == 0) {
        best = v;
        won = at;
      } else {
        const typename A::M t = A::takes(v, best);
        best = A::select(t, best, v);
        won = A::select(t, won, at);
      }
    }
    const typename A::M k = A::first(len);
    A::store(y + ob, k, best);
    A::store_index(argmax + ob, k, won, row_v, ob);
  }
}

// A whole plane of 2 x 2, stride-2 windows: output row o1 reads input rows 2 o1 and 2 o1 + 1.
template <class T>
void plane_2(const T* x, std::int64_t base, std::int64_t in2, std::int64_t out1, std::int64_t m,
             T* y, std::int64_t* argmax) {
  for (std::int64_t o1 = 0; o1 < out1; ++o1) {
    const std::int64_t rows[2] = {base + 2 * o1 * in2, base + (2 * o1 + 1) * in2};
    row_2(x, rows, 2, m, y + o1 * m, argmax + o1 * m);
  }
}

}  // namespace

DISTOP_TARGET_END

template <class T>
void max_pool_row_2(const T* x, const std::int64_t* rows, int r_count, std::int64_t m, T* y,
                    std::int64_t* argmax) {
  row_2(x, rows, r_count, m, y, argmax);
}

template <class T>
void max_pool_plane_2(const T* x, std::int64_t base, std::int64_t in2, std::int64_t out1,
                      std::int64_t m, T* y, std::int64_t* argmax) {
  plane_2(x, base, in2, out1, m, y, argmax);
}

#else

template <class T>
void max_pool_row_2(const T*, const std::int64_t*, int, std::int64_t, T*, std::int64_t*) {}
template <class T>
void max_pool_plane_2(const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*,
                      std::int64_t*) {}

#endif

template void max_pool_row_2<float>(const float*, const std::int64_t*, int, std::int64_t, float*,
                                    std::int64_t*);
template void max_pool_row_2<double>(const double*, const std::int64_t*, int, std::int64_t, double*,
                                     std::int64_t*);

template void max_pool_plane_2<float>(const float*, std::int64_t, std::int64_t, std::int64_t,
                                      std::int64_t, float*, std::int64_t*);
template void max_pool_plane_2<double>(const double*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t, double*, std::int64_t*);

}  // namespace distop::kernels::detail
