#include "box_simd.hpp"

#include <cstdint>
#include <cstdlib>

#include "simd_target.hpp"

namespace distop::kernels::detail {

bool simd_box_sweeps() {
#ifdef DISTOP_SIMD_X86
  return host_simd_bytes() >= 32;
#else
  return false;
#endif
}

#ifdef DISTOP_SIMD_X86

namespace {
constexpr std::int64_t kPageBytes = 4096;
constexpr std::int64_t kAhead = 2;
}  // namespace

DISTOP_TARGET_BEGIN("avx512f")
namespace avx512 {
namespace {

// Copies bytes (a multiple of 4) from s to d: 64-byte vectors, the last one masked.
inline void copy_bytes(char* d, const char* s, std::int64_t bytes) {
  std::int64_t b = 0;
  for (; b + 64 <= bytes; b += 64) _mm512_storeu_si512(d + b, _mm512_loadu_si512(s + b));
  if (b < bytes) {
    const auto k = static_cast<__mmask16>((1u << ((bytes - b) / 4)) - 1u);  // 32-bit lanes
    _mm512_mask_storeu_epi32(d + b, k, _mm512_maskz_loadu_epi32(k, s + b));
  }
}

// The vector operations of one element type, for add_entries. (The zero-masked adds under an
// all-ones mask are the plain ones: GCC 12's headers build the plain ones on an undefined vector
// and then warn about it.)
template <class T>
struct Lanes;
template <>
struct Lanes<float> {
  static constexpr std::int64_t L = 16;
  using V = __m512;
  using M = __mmask16;
  static M first(std::int64_t n) { return static_cast<M>((1u << n) - 1u); }  // n < L
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load(M k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, M k, V v) { _mm512_mask_storeu_ps(p, k, v); }
  static V add(V a, V b) { return _mm512_maskz_add_ps(0xFFFF, a, b); }
};
template <>
struct Lanes<double> {
  static constexpr std::int64_t L = 8;
  using V = __m512d;
  using M = __mmask8;
  static M first(std::int64_t n) { return static_cast<M>((1u << n) - 1u); }
  static V loadu(const double* p) { return _mm512_loadu_pd(p); }
  static void storeu(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V load(M k, const double* p) { return _mm512_maskz_loadu_pd(k, p); }
  static void store(double* p, M k, V v) { _mm512_mask_storeu_pd(p, k, v); }
  static V add(V a, V b) { return _mm512_maskz_add_pd(0xFF, a, b); }
};

#include "box_simd.inc"
}  // namespace
}  // namespace avx512
DISTOP_TARGET_END

DISTOP_TARGET_BEGIN("avx2")
namespace avx2 {
namespace {

// The first `count` 32-bit lanes (count < 8), as a mask for AVX2's masked loads and stores.
inline __m256i first_lanes(std::int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Copies bytes (a multiple of 4) from s to d: 32-byte vectors, the last one masked.
inline void copy_bytes(char* d, const char* s, std::int64_t bytes) {
  std::int64_t b = 0;
  for (; b + 32 <= bytes; b += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + b)));
  if (b < bytes) {
    const __m256i k = first_lanes((bytes - b) / 4);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(d + b), k,
                           _mm256_maskload_epi32(reinterpret_cast<const int*>(s + b), k));
  }
}

// The vector operations of one element type, for add_entries; masks are vectors of lanes.
template <class T>
struct Lanes;
template <>
struct Lanes<float> {
  static constexpr std::int64_t L = 8;
  using V = __m256;
  using M = __m256i;
  static M first(std::int64_t n) { return first_lanes(n); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load(M k, const float* p) { return _mm256_maskload_ps(p, k); }
  static void store(float* p, M k, V v) { _mm256_maskstore_ps(p, k, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
};
template <>
struct Lanes<double> {
  static constexpr std::int64_t L = 4;
  using V = __m256d;
  using M = __m256i;
  // 64-bit lanes: each the sign-extended pair of its two 32-bit halves.
  static M first(std::int64_t n) {
    return _mm256_cvtepi32_epi64(
        _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n)), _mm_setr_epi32(0, 1, 2, 3)));
  }
  static V loadu(const double* p) { return _mm256_loadu_pd(p); }
  static void storeu(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V load(M k, const double* p) { return _mm256_maskload_pd(p, k); }
  static void store(double* p, M k, V v) { _mm256_maskstore_pd(p, k, v); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
};

#include "box_simd.inc"
}  // namespace
}  // namespace avx2
DISTOP_TARGET_END

template <class T>
void copy_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
                std::int64_t run) {
  if (host_simd_bytes() >= 64)
    avx512::copy_runs(d, sd, s, ss, count, run);
  else
    avx2::copy_runs(d, sd, s, ss, count, run);
}

template <class T>
void add_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
               std::int64_t run) {
  if (host_simd_bytes() >= 64)
    avx512::add_runs(d, sd, s, ss, count, run);
  else
    avx2::add_runs(d, sd, s, ss, count, run);
}

#else

template <class T>
void copy_sweep(T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t) {}
template <class T>
void add_sweep(T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t) {}

#endif

template void copy_sweep<float>(float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                                std::int64_t);
template void copy_sweep<double>(double*, std::int64_t, const double*, std::int64_t, std::int64_t,
                                 std::int64_t);
template void add_sweep<float>(float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                               std::int64_t);
template void add_sweep<double>(double*, std::int64_t, const double*, std::int64_t, std::int64_t,
                                std::int64_t);

}  // namespace distop::kernels::detail
