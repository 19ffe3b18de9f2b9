#include "rows_simd.hpp"

#include <cstdint>

#include "distop/kernels/simd.hpp"
#include "simd_target.hpp"

namespace distop::kernels::detail {

namespace {
template <class T>
constexpr std::int64_t kLanes = 64 / static_cast<std::int64_t>(sizeof(T));
}  // namespace

template <class T>
bool simd_add_short_rows(std::int64_t n) {
#ifdef DISTOP_SIMD_X86
  return n >= 1 && n <= kLanes<T> && host_simd_bytes() >= 64;
#else
  (void)n;
  return false;
#endif
}

#ifdef DISTOP_SIMD_X86

DISTOP_TARGET_BEGIN("avx512f")

namespace {

// (The zero-masked forms of a few intrinsics below, under an all-ones mask, are the plain ones:
// GCC 12's headers build the plain ones on an undefined vector and then warn about it.)
template <class T>
struct Lanes;

template <>
struct Lanes<float> {
  using V = __m512;
  using M = __mmask16;
  static M first(std::int64_t n) { return n >= 16 ? M(0xFFFF) : static_cast<M>((1u << n) - 1u); }
  static V load(M k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, M k, V v) { _mm512_mask_storeu_ps(p, k, v); }
  static V add(V a, V b) { return _mm512_maskz_add_ps(M(0xFFFF), a, b); }
  // Lane l: l, as an index of the vector's entries.
  static __m512i iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static __m512i splat(std::int64_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static __m512i add(__m512i a, __m512i b) { return _mm512_maskz_add_epi32(M(0xFFFF), a, b); }
  // a - n where a >= n; a otherwise (for 0 <= a < 2n).
  static __m512i wrap(__m512i a, __m512i n) {
    return _mm512_mask_sub_epi32(a, _mm512_cmpge_epi32_mask(a, n), a, n);
  }
  static V permute(__m512i idx, V v) { return _mm512_maskz_permutexvar_ps(M(0xFFFF), idx, v); }
};

template <>
struct Lanes<double> {
  using V = __m512d;
  using M = __mmask8;
  static M first(std::int64_t n) { return n >= 8 ? M(0xFF) : static_cast<M>((1u << n) - 1u); }
  static V load(M k, const double* p) { return _mm512_maskz_loadu_pd(k, p); }
  static void store(double* p, M k, V v) { _mm512_mask_storeu_pd(p, k, v); }
  static V add(V a, V b) { return _mm512_maskz_add_pd(M(0xFF), a, b); }
  static __m512i iota() { return _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7); }
  static __m512i splat(std::int64_t v) { return _mm512_set1_epi64(v); }
  static __m512i add(__m512i a, __m512i b) { return _mm512_maskz_add_epi64(M(0xFF), a, b); }
  static __m512i wrap(__m512i a, __m512i n) {
    return _mm512_mask_sub_epi64(a, _mm512_cmpge_epi64_mask(a, n), a, n);
  }
  static V permute(__m512i idx, V v) { return _mm512_maskz_permutexvar_pd(M(0xFF), idx, v); }
};

template <class T>
void add_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  using L = Lanes<T>;
  using V = typename L::V;
  constexpr std::int64_t lanes = kLanes<T>;
  const std::int64_t total = rows * n;
  if (total == 0) return;
  // The period: vectors holds lcm(n, lanes) entries of b repeated, vector v's lane l holding
  // b[(v lanes + l) mod n]. n / gcd(n, lanes) <= lanes vectors.
  std::int64_t g = lanes;
  while (n % g != 0) g /= 2;  // lanes is a power of two
  const std::int64_t count = n / g;
  const V bv = L::load(L::first(n), b);
  const __m512i vn = L::splat(n);
  const __m512i step = L::splat(lanes % n);
  __m512i idx = L::iota();
  for (std::int64_t k = 0; k < lanes / n; ++k) idx = L::wrap(idx, vn);  // lane mod n
  V pattern[lanes];
  for (std::int64_t v = 0; v < count; ++v) {
    pattern[v] = L::permute(idx, bv);
    idx = L::wrap(L::add(idx, step), vn);
  }
  const std::int64_t period = count * lanes;
  const auto all = L::first(lanes);
  std::int64_t t = 0;
  for (; t + period <= total; t += period)
    for (std::int64_t v = 0; v < count; ++v) {
      T* const p = y + t + v * lanes;
      L::store(p, all, L::add(L::load(all, p), pattern[v]));
    }
  for (std::int64_t v = 0; t < total; ++v, t += lanes) {
    const auto k = L::first(total - t);
    T* const p = y + t;
    L::store(p, k, L::add(L::load(k, p), pattern[v]));
  }
}

}  // namespace

DISTOP_TARGET_END

template <class T>
void add_short_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  add_rows(y, b, rows, n);
}

#else

template <class T>
void add_short_rows(T*, const T*, std::int64_t, std::int64_t) {}

#endif

template bool simd_add_short_rows<float>(std::int64_t);
template bool simd_add_short_rows<double>(std::int64_t);
template void add_short_rows<float>(float*, const float*, std::int64_t, std::int64_t);
template void add_short_rows<double>(double*, const double*, std::int64_t, std::int64_t);

}  // namespace distop::kernels::detail
