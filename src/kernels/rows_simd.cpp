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
bool simd_short_rows(std::int64_t n) {
  return n >= 1 && n <= kLanes<T> && host_avx512();
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
  // acc[0] += lanes 0-7 of v, acc[1] += lanes 8-15, in double.
  static constexpr int halves = 2;
  static void accumulate(__m512d* acc, V v) {
    const __m512d d = _mm512_castps_pd(v);
    const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0));
    const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1));
    acc[0] = _mm512_maskz_add_pd(0xFF, acc[0], _mm512_maskz_cvtps_pd(0xFF, lo));
    acc[1] = _mm512_maskz_add_pd(0xFF, acc[1], _mm512_maskz_cvtps_pd(0xFF, hi));
  }
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
  static constexpr int halves = 1;
  static void accumulate(__m512d* acc, V v) { acc[0] = _mm512_maskz_add_pd(0xFF, acc[0], v); }
};

// Vectors of T in one period of rows of n entries: lcm(n, lanes) / lanes = n / gcd(n, lanes), at
// most lanes for n <= lanes.
template <class T>
std::int64_t period_vectors(std::int64_t n) {
  std::int64_t g = kLanes<T>;
  while (n % g != 0) g /= 2;  // lanes is a power of two
  return n / g;
}

template <class T>
void add_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  using L = Lanes<T>;
  using V = typename L::V;
  constexpr std::int64_t lanes = kLanes<T>;
  const std::int64_t total = rows * n;
  if (total == 0) return;
  // b repeated over one period: vector v's lane l holds b[(v lanes + l) mod n].
  const std::int64_t count = period_vectors<T>(n);
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

template <class T>
void sum_rows(const T* dy, std::int64_t rows, std::int64_t n, double* s) {
  using L = Lanes<T>;
  constexpr std::int64_t lanes = kLanes<T>;
  constexpr int halves = L::halves;
  // A stretch of whole periods, at least 4 vectors long where a period is shorter, so that
  // 4 or more independent sums are under way; each of its vectors is summed into its own
  // accumulators (lanes in double).
  const std::int64_t count = period_vectors<T>(n);
  const std::int64_t vecs = count >= 4 ? count : count * ((4 + count - 1) / count);
  const std::int64_t stretch = vecs * lanes;
  constexpr std::int64_t kMaxVecs = lanes + 4;  // count <= lanes; 4 / count more for count < 4
  __m512d acc[halves * kMaxVecs];
  for (std::int64_t a = 0; a < halves * vecs; ++a) acc[a] = _mm512_setzero_pd();
  const std::int64_t total = rows * n;
  const auto all = L::first(lanes);
  std::int64_t t = 0;
  for (; t + stretch <= total; t += stretch)
    for (std::int64_t v = 0; v < vecs; ++v)
      L::accumulate(acc + halves * v, L::load(all, dy + t + v * lanes));
  for (std::int64_t v = 0; t < total; ++v, t += lanes)
    L::accumulate(acc + halves * v, L::load(L::first(total - t), dy + t));  // zeros past the end
  // Entry e of the stretch belongs to column e mod n: each column's sum, over the stretch's
  // rows in order (all columns a row at a time, so that the columns' sums run side by side).
  alignas(64) double part[halves * kMaxVecs * 8];
  for (std::int64_t a = 0; a < halves * vecs; ++a) _mm512_store_pd(part + 8 * a, acc[a]);
  for (std::int64_t j = 0; j < n; ++j) s[j] = part[j];
  for (std::int64_t e = n; e < stretch; e += n)
    for (std::int64_t j = 0; j < n; ++j) s[j] += part[e + j];
}

}  // namespace

DISTOP_TARGET_END

template <class T>
void add_short_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  add_rows(y, b, rows, n);
}

template <class T>
void sum_short_rows(const T* dy, std::int64_t rows, std::int64_t n, double* s) {
  sum_rows(dy, rows, n, s);
}

#else

template <class T>
void add_short_rows(T*, const T*, std::int64_t, std::int64_t) {}
template <class T>
void sum_short_rows(const T*, std::int64_t, std::int64_t, double*) {}

#endif

template bool simd_short_rows<float>(std::int64_t);
template bool simd_short_rows<double>(std::int64_t);
template void add_short_rows<float>(float*, const float*, std::int64_t, std::int64_t);
template void add_short_rows<double>(double*, const double*, std::int64_t, std::int64_t);
template void sum_short_rows<float>(const float*, std::int64_t, std::int64_t, double*);
template void sum_short_rows<double>(const double*, std::int64_t, std::int64_t, double*);

}  // namespace distop::kernels::detail
