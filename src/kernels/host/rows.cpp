#include <cstdint>
#include <cstring>

#include "fast_path.hpp"
#include "rows_simd.hpp"

#if DISTOP_HOST_KERNELS

// The host fast paths of the bias-row kernels of elementwise_rows.cpp (add_row_vector, fill_rows,
// sum_rows): plain loops and the AVX-512/AVX2 short-row forms of rows_simd.hpp, where the portable
// form is a Kokkos parallel loop with a work item per entry (or per tile of columns).

namespace distop::kernels::host_fast_path {

namespace {

// y[i n + j] += b[j]. Restrict-qualified parameters, so that the compiler vectorises the inner
// loop without checking for overlap row after row.
template <class T>
void add_rows(T* __restrict y, const T* __restrict b, std::int64_t rows, std::int64_t n) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < n; ++j) y[i * n + j] += b[j];
}

}  // namespace

template <class T>
bool add_row_vector(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    // Rows of at most 64 bytes (a narrow layer's: 10 outputs) in AVX-512 or AVX2 registers, as one
    // flat array; longer rows in a plain loop whose inner loop the compiler vectorises. (A
    // Kokkos::parallel_for with a row per work item took five times as long as the plain loop,
    // and the plain loop on rows of 10 floats three times as long as the vector form.)
    if (detail::simd_short_rows<T>(n))
      detail::add_short_rows(y, b, rows, n);
    else
      add_rows(y, b, rows, n);
    return true;
  }
}

template <class T>
bool fill_rows(T* y, const T* b, std::int64_t rows, std::int64_t n) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    // Stores only, which the GEMM's beta = 1 pass then reads from cache: b into the first row,
    // then the filled rows copied after themselves, doubling each time (a few long copies rather
    // than a call or a short loop per row; rows are often a few dozen bytes).
    const auto row_bytes = static_cast<std::size_t>(n) * sizeof(T);
    std::memcpy(y, b, row_bytes);
    for (std::int64_t done = 1; done < rows;) {
      const std::int64_t count = done < rows - done ? done : rows - done;
      std::memcpy(y + done * n, y, static_cast<std::size_t>(count) * row_bytes);
      done += count;
    }
    return true;
  }
}

template <class T>
bool sum_rows(const T* dy, std::int64_t rows, std::int64_t n, T beta, T* db) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    // Rows of at most 64 bytes (a narrow layer's) in AVX-512 or AVX2 registers, as one flat array;
    // false for longer rows (the portable form's column tiles suit them).
    if (!detail::simd_short_rows<T>(n)) return false;
    double s[16];  // n <= 16
    detail::sum_short_rows(dy, rows, n, s);
    for (std::int64_t j = 0; j < n; ++j)
      db[j] = beta == T(0) ? static_cast<T>(s[j]) : static_cast<T>(s[j] + beta * db[j]);
    return true;
  }
}

#define DISTOP_INSTANTIATE_HOST_ROWS(T)                                   \
  template bool add_row_vector(T*, const T*, std::int64_t, std::int64_t); \
  template bool fill_rows(T*, const T*, std::int64_t, std::int64_t);      \
  template bool sum_rows(const T*, std::int64_t, std::int64_t, T, T*);
DISTOP_INSTANTIATE_HOST_ROWS(float)
DISTOP_INSTANTIATE_HOST_ROWS(double)
#undef DISTOP_INSTANTIATE_HOST_ROWS

}  // namespace distop::kernels::host_fast_path

#endif  // DISTOP_HOST_KERNELS
