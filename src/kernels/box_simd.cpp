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

#include "simd_vec_avx512.inc"

// Copies bytes (a multiple of 4) from s to d: 64-byte vectors, the last one masked.
inline void copy_bytes(char* d, const char* s, std::int64_t bytes) {
  std::int64_t b = 0;
  for (; b + 64 <= bytes; b += 64) _mm512_storeu_si512(d + b, _mm512_loadu_si512(s + b));
  if (b < bytes) {
    const auto k = static_cast<__mmask16>((1u << ((bytes - b) / 4)) - 1u);  // 32-bit lanes
    _mm512_mask_storeu_epi32(d + b, k, _mm512_maskz_loadu_epi32(k, s + b));
  }
}

#include "box_simd.inc"
}  // namespace
}  // namespace avx512
DISTOP_TARGET_END

DISTOP_TARGET_BEGIN("avx2")
namespace avx2 {
namespace {

#include "simd_vec_avx2.inc"

// Copies bytes (a multiple of 4) from s to d: 32-byte vectors, the last one masked.
inline void copy_bytes(char* d, const char* s, std::int64_t bytes) {
  std::int64_t b = 0;
  for (; b + 32 <= bytes; b += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + b),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + b)));
  if (b < bytes) {
    const __m256i k = first32((bytes - b) / 4);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(d + b), k,
                           _mm256_maskload_epi32(reinterpret_cast<const int*>(s + b), k));
  }
}

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
