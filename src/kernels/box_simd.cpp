#include "box_simd.hpp"

#include <cstdint>
#include <type_traits>

#include "distop/kernels/simd.hpp"
#include "simd_target.hpp"

namespace distop::kernels::detail {

bool simd_box_sweeps() { return host_avx512(); }

#ifdef DISTOP_SIMD_X86

DISTOP_TARGET_BEGIN("avx512f")

namespace {

// The lanes of the last, partial vector of a run: 32-bit lanes (float, and double as pairs).
__mmask16 tail_mask(std::int64_t bytes) { return static_cast<__mmask16>((1u << (bytes / 4)) - 1u); }

// Copies bytes (a multiple of 4) from s to d.
inline void copy_bytes(char* d, const char* s, std::int64_t bytes) {
  std::int64_t b = 0;
  for (; b + 64 <= bytes; b += 64) _mm512_storeu_si512(d + b, _mm512_loadu_si512(s + b));
  if (b < bytes) {
    const __mmask16 k = tail_mask(bytes - b);
    _mm512_mask_storeu_epi32(d + b, k, _mm512_maskz_loadu_epi32(k, s + b));
  }
}

struct AddFloat {
  using V = __m512;
  static V load(__mmask16 k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, __mmask16 k, V v) { _mm512_mask_storeu_ps(p, k, v); }
  static V add(V a, V b) { return _mm512_maskz_add_ps(0xFFFF, a, b); }
};
struct AddDouble {
  using V = __m512d;
  static V load(__mmask16 k, const double* p) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>(k), p);
  }
  static void store(double* p, __mmask16 k, V v) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(k), v);
  }
  static V add(V a, V b) { return _mm512_maskz_add_pd(0xFF, a, b); }
};
template <class T>
using Add = std::conditional_t<sizeof(T) == 4, AddFloat, AddDouble>;

// d[0 .. n) += s[0 .. n).
template <class T>
inline void add_entries(T* d, const T* s, std::int64_t n) {
  using A = Add<T>;
  constexpr std::int64_t lanes = 64 / sizeof(T);
  std::int64_t j = 0;
  for (; j + lanes <= n; j += lanes)
    A::store(d + j, 0xFFFF, A::add(A::load(0xFFFF, d + j), A::load(0xFFFF, s + j)));
  if (j < n) {
    // Lanes of T: for double, one mask bit per lane (the low 8 bits).
    const auto k = static_cast<__mmask16>((1u << (n - j)) - 1u);
    A::store(d + j, k, A::add(A::load(k, d + j), A::load(k, s + j)));
  }
}

template <class T>
void copy_runs(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
               std::int64_t run) {
  const auto bytes = run * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t i = 0; i < count; ++i)
    copy_bytes(reinterpret_cast<char*>(d + i * sd), reinterpret_cast<const char*>(s + i * ss),
               bytes);
}

template <class T>
void add_runs(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
              std::int64_t run) {
  for (std::int64_t i = 0; i < count; ++i) add_entries(d + i * sd, s + i * ss, run);
}

}  // namespace

DISTOP_TARGET_END

template <class T>
void copy_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
                std::int64_t run) {
  copy_runs(d, sd, s, ss, count, run);
}

template <class T>
void add_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
               std::int64_t run) {
  add_runs(d, sd, s, ss, count, run);
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
