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
// A copy whose destination lies less than this far ahead of its source, modulo a page, runs from
// the end (see copy_runs in box_simd.inc).
constexpr std::uintptr_t kAliasBytes = 1024;
}  // namespace

DISTOP_TARGET_BEGIN("avx512f")
namespace avx512 {
namespace {

#include "simd_vec_avx512.inc"

// One 64-byte vector, and the first bytes (a multiple of 4, under 64) of one, from s to d.
constexpr std::int64_t kVecBytes = 64;
inline void copy_vector(char* d, const char* s) { _mm512_storeu_si512(d, _mm512_loadu_si512(s)); }
inline void copy_tail(char* d, const char* s, std::int64_t bytes) {
  const auto k = static_cast<__mmask16>((1u << (bytes / 4)) - 1u);  // 32-bit lanes
  _mm512_mask_storeu_epi32(d, k, _mm512_maskz_loadu_epi32(k, s));
}

#include "box_simd.inc"
}  // namespace
}  // namespace avx512
DISTOP_TARGET_END

DISTOP_TARGET_BEGIN("avx2")
namespace avx2 {
namespace {

#include "simd_vec_avx2.inc"

// One 32-byte vector, and the first bytes (a multiple of 4, under 32) of one, from s to d.
constexpr std::int64_t kVecBytes = 32;
inline void copy_vector(char* d, const char* s) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d),
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
}
inline void copy_tail(char* d, const char* s, std::int64_t bytes) {
  const __m256i k = first32(bytes / 4);
  _mm256_maskstore_epi32(reinterpret_cast<int*>(d), k,
                         _mm256_maskload_epi32(reinterpret_cast<const int*>(s), k));
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
