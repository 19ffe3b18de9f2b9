#include "rows_simd.hpp"

#include <cstdint>

#include "simd_target.hpp"

namespace distop::kernels::detail {

template <class T>
bool simd_short_rows(std::int64_t n) {
#ifdef DISTOP_SIMD_X86
  return n >= 1 && n * static_cast<std::int64_t>(sizeof(T)) <= 64 && host_simd_bytes() >= 32;
#else
  (void)n;
  return false;
#endif
}

#ifdef DISTOP_SIMD_X86

DISTOP_TARGET_BEGIN("avx512f")
namespace avx512 {
namespace {

#include "simd_vec_avx512.inc"

// Vec<T>, and what the short-row kernels add to it (rows_simd.inc). (The zero-masked forms under
// an all-ones mask are the plain ones, as in Vec.)
template <class T>
struct Lanes;

template <>
struct Lanes<float> : Vec<float> {
  using Vec<float>::add;  // and add(I, I) below
  using B = __m512;
  using I = __m512i;
  using A = __m512d;
  static constexpr std::int64_t halves = 2;
  static constexpr std::int64_t acc_lanes = 8;
  static B load_b(const float* b, std::int64_t n) { return load_upto(b, n); }
  static I iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static I splat(std::int64_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static I add(I a, I b) { return _mm512_maskz_add_epi32(0xFFFF, a, b); }
  static I wrap(I a, I n) { return _mm512_mask_sub_epi32(a, _mm512_cmpge_epi32_mask(a, n), a, n); }
  static V permute(I idx, B b) { return _mm512_maskz_permutexvar_ps(0xFFFF, idx, b); }
  static A zero() { return _mm512_setzero_pd(); }
  static void accumulate(A* acc, V v) {
    const __m512d d = _mm512_castps_pd(v);
    const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0));
    const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1));
    acc[0] = _mm512_maskz_add_pd(0xFF, acc[0], _mm512_maskz_cvtps_pd(0xFF, lo));
    acc[1] = _mm512_maskz_add_pd(0xFF, acc[1], _mm512_maskz_cvtps_pd(0xFF, hi));
  }
  static void store_acc(double* p, A a) { _mm512_store_pd(p, a); }
};

template <>
struct Lanes<double> : Vec<double> {
  using Vec<double>::add;  // and add(I, I) below
  using B = __m512d;
  using I = __m512i;
  using A = __m512d;
  static constexpr std::int64_t halves = 1;
  static constexpr std::int64_t acc_lanes = 8;
  static B load_b(const double* b, std::int64_t n) { return load_upto(b, n); }
  static I iota() { return _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7); }
  static I splat(std::int64_t v) { return _mm512_set1_epi64(v); }
  static I add(I a, I b) { return _mm512_maskz_add_epi64(0xFF, a, b); }
  static I wrap(I a, I n) { return _mm512_mask_sub_epi64(a, _mm512_cmpge_epi64_mask(a, n), a, n); }
  static V permute(I idx, B b) { return _mm512_maskz_permutexvar_pd(0xFF, idx, b); }
  static A zero() { return _mm512_setzero_pd(); }
  static void accumulate(A* acc, V v) { acc[0] = _mm512_maskz_add_pd(0xFF, acc[0], v); }
  static void store_acc(double* p, A a) { _mm512_store_pd(p, a); }
};

#include "rows_simd.inc"
}  // namespace
}  // namespace avx512
DISTOP_TARGET_END

DISTOP_TARGET_BEGIN("avx2")
namespace avx2 {
namespace {

#include "simd_vec_avx2.inc"

// b (up to 64 bytes) in two vectors of 32 bytes: bytes 0-31 and 32-63.
struct PairF {
  __m256 lo, hi;
};
struct PairD {
  __m256d lo, hi;
};

template <class T>
struct Lanes;

template <>
struct Lanes<float> : Vec<float> {
  using Vec<float>::add;  // and add(I, I) below
  using B = PairF;
  using I = __m256i;
  using A = __m256d;
  static constexpr std::int64_t halves = 2;
  static constexpr std::int64_t acc_lanes = 4;
  static B load_b(const float* b, std::int64_t n) {
    return {load_upto(b, n), load_upto(b + L, n - L)};
  }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I splat(std::int64_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I wrap(I a, I n) {  // a > n - 1: a >= n
    return _mm256_sub_epi32(
        a, _mm256_and_si256(n, _mm256_cmpgt_epi32(a, _mm256_sub_epi32(n, _mm256_set1_epi32(1)))));
  }
  // Lane l: b[idx[l]], from lo for indices 0-7 and hi for 8-15 (the permute reads 3 bits).
  static V permute(I idx, B b) {
    const __m256 from_hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(L - 1)));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(b.lo, idx),
                            _mm256_permutevar8x32_ps(b.hi, idx), from_hi);
  }
  static A zero() { return _mm256_setzero_pd(); }
  static void accumulate(A* acc, V v) {
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  static void store_acc(double* p, A a) { _mm256_store_pd(p, a); }
};

template <>
struct Lanes<double> : Vec<double> {
  using Vec<double>::add;  // and add(I, I) below
  using B = PairD;
  using I = __m256i;  // 64-bit lanes
  using A = __m256d;
  static constexpr std::int64_t halves = 1;
  static constexpr std::int64_t acc_lanes = 4;
  static B load_b(const double* b, std::int64_t n) {
    return {load_upto(b, n), load_upto(b + L, n - L)};
  }
  static I iota() { return _mm256_setr_epi64x(0, 1, 2, 3); }
  static I splat(std::int64_t v) { return _mm256_set1_epi64x(v); }
  static I add(I a, I b) { return _mm256_add_epi64(a, b); }
  static I wrap(I a, I n) {
    return _mm256_sub_epi64(
        a, _mm256_and_si256(n, _mm256_cmpgt_epi64(a, _mm256_sub_epi64(n, _mm256_set1_epi64x(1)))));
  }
  // Lane l: b[idx[l]], as the 32-bit halves 2 idx and 2 idx + 1 of lo (indices 0-3) or hi (4-7).
  static V permute(I idx, B b) {
    const __m256i halves32 = _mm256_or_si256(
        _mm256_slli_epi64(idx, 1),
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_slli_epi64(idx, 1), _mm256_set1_epi64x(1)), 32));
    const __m256d from_hi = _mm256_castsi256_pd(_mm256_cmpgt_epi64(idx, _mm256_set1_epi64x(L - 1)));
    const __m256d lo = _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(b.lo), halves32));
    const __m256d hi = _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(b.hi), halves32));
    return _mm256_blendv_pd(lo, hi, from_hi);
  }
  static A zero() { return _mm256_setzero_pd(); }
  static void accumulate(A* acc, V v) { acc[0] = _mm256_add_pd(acc[0], v); }
  static void store_acc(double* p, A a) { _mm256_store_pd(p, a); }
};

#include "rows_simd.inc"
}  // namespace
}  // namespace avx2
DISTOP_TARGET_END

template <class T>
void add_short_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  if (host_simd_bytes() >= 64)
    avx512::add_rows(y, b, rows, n);
  else
    avx2::add_rows(y, b, rows, n);
}

template <class T>
void sum_short_rows(const T* dy, std::int64_t rows, std::int64_t n, double* s) {
  if (host_simd_bytes() >= 64)
    avx512::sum_rows(dy, rows, n, s);
  else
    avx2::sum_rows(dy, rows, n, s);
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
