#include "box_simd.hpp"

#include <cstdint>
#include <cstdlib>
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

constexpr std::int64_t kPageBytes = 4096;
constexpr std::int64_t kAhead = 2;

// Requests the lines of bytes at p (W = 1: for writing).
template <int W>
inline void prefetch_run(const char* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, W, 3);
}

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

// op(d + i sd, s + i ss) for i < count, op a copy. Runs shorter than a page but a page or more
// apart are each in a page the hardware prefetchers have not seen: their lines are requested two
// runs ahead (for writing, on the destination side).
template <class T, class Op>
inline void sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
                  std::int64_t run, Op op) {
  const auto size = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t bytes = run * size;
  const bool far_d = bytes < kPageBytes && std::abs(sd) * size >= kPageBytes;
  const bool far_s = bytes < kPageBytes && std::abs(ss) * size >= kPageBytes;
  std::int64_t i = 0;
  if (far_d || far_s)
    for (; i + kAhead < count; ++i) {
      if (far_d) prefetch_run<1>(reinterpret_cast<const char*>(d + (i + kAhead) * sd), bytes);
      if (far_s) prefetch_run<0>(reinterpret_cast<const char*>(s + (i + kAhead) * ss), bytes);
      op(d + i * sd, s + i * ss);
    }
  for (; i < count; ++i) op(d + i * sd, s + i * ss);
}

template <class T>
void copy_runs(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
               std::int64_t run) {
  const std::int64_t bytes = run * static_cast<std::int64_t>(sizeof(T));
  sweep(d, sd, s, ss, count, run, [bytes](T* dr, const T* sr) {
    copy_bytes(reinterpret_cast<char*>(dr), reinterpret_cast<const char*>(sr), bytes);
  });
}

// (Without the requests ahead: with them, the sum over runs of 1 KiB 4 KiB apart took 1.3x as
// long; its loads of d start the lines' transfers early enough.)
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
