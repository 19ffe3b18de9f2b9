#pragma once
// Internal: loops over runs of contiguous entries on the host, shared by the kernels that copy
// rows (conv's im2col forms, the box copies).

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace distop::kernels::detail {

// dst[i] += src[i] for i < n, on the host; the two runs do not overlap, which the compiler is
// told so that it vectorises the loop without a run-time overlap check (runs are short: an
// output row, often 10-30 entries).
template <class T>
inline void add_run(T* __restrict dst, const T* __restrict src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst[i] = src[i] for i < n (the runs do not overlap). Runs at least kMemcpyRunBytes long go to
// memcpy; shorter ones are copied inline in fixed-size pieces, where a call per run would cost as
// much as the copy.
constexpr std::size_t kMemcpyRunBytes = 1024;

template <class T>
inline void copy_run(T* d, const T* s, std::int64_t n) {
  std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
  if (bytes >= kMemcpyRunBytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  auto* dc = reinterpret_cast<unsigned char*>(d);
  const auto* sc = reinterpret_cast<const unsigned char*>(s);
  for (; bytes >= 32; bytes -= 32, dc += 32, sc += 32) std::memcpy(dc, sc, 32);
  if (bytes & 16) {
    std::memcpy(dc, sc, 16);
    dc += 16;
    sc += 16;
  }
  if (bytes & 8) {
    std::memcpy(dc, sc, 8);
    dc += 8;
    sc += 8;
  }
  if (bytes & 4) {
    std::memcpy(dc, sc, 4);
    dc += 4;
    sc += 4;
  }
  for (; bytes & 3; --bytes) *dc++ = *sc++;  // never for float and double
}

// One run of an im2col-style matrix on the host: dst[o] = row[o * s2 + b] for o in [lo, hi) (the
// outputs whose tap reads inside the input row), zero for the rest of [0, m); all zero when row
// is null (the tap's row lies outside the input).
template <class T>
inline void read_run(T* dst, const T* row, std::int64_t m, std::int64_t lo, std::int64_t hi,
                     std::int64_t b, std::int64_t s2) {
  if (row == nullptr) {
    for (std::int64_t o = 0; o < m; ++o) dst[o] = T(0);
    return;
  }
  for (std::int64_t o = 0; o < lo; ++o) dst[o] = T(0);
  if (s2 == 1) {
    copy_run(dst + lo, row + lo + b, hi - lo);
  } else {
    for (std::int64_t o = lo; o < hi; ++o) dst[o] = row[o * s2 + b];
  }
  for (std::int64_t o = hi; o < m; ++o) dst[o] = T(0);
}

// The adjoint of read_run: row[o * s2 + b] += src[o] for o in [lo, hi).
template <class T>
inline void add_back_run(T* row, const T* src, std::int64_t lo, std::int64_t hi, std::int64_t b,
                         std::int64_t s2) {
  if (s2 == 1) {
    add_run(row + lo + b, src + lo, hi - lo);
  } else {
    for (std::int64_t o = lo; o < hi; ++o) row[o * s2 + b] += src[o];
  }
}

// p[0 .. n) = beta p (not read when beta is 0): the start of an accumulated gradient.
template <class T>
inline void scale_or_zero_run(T* p, std::int64_t n, T beta) {
  if (beta == T(0)) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = T(0);
  } else if (beta != T(1)) {
    for (std::int64_t i = 0; i < n; ++i) p[i] *= beta;
  }
}

}  // namespace distop::kernels::detail
