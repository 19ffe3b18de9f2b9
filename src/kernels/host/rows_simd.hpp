#pragma once
// Internal: AVX-512 and AVX2 forms of adding a short vector to every row of a matrix and of summing
// its columns (a narrow layer's bias and its gradient), chosen at run time (kernels/simd.hpp).

#include <cstdint>

namespace distop::kernels::detail {

// Whether the kernels below run on this CPU for rows of n entries of T: AVX-512, or AVX2 with FMA
// (within the cap of set_host_simd_cap; the widest is taken), and rows of at most 64 bytes (16
// floats, 8 doubles).
template <class T>
bool simd_short_rows(std::int64_t n);

// y[i n + j] += b[j] for rows i < rows, j < n, where simd_short_rows<T>(n). b repeated over a
// whole number of vectors is built in registers (lcm(n, lanes) entries), then added to y, read
// as one flat array, a vector at a time: no loop per row, and no partial vector but the last.
template <class T>
void add_short_rows(T* y, const T* b, std::int64_t rows, std::int64_t n);

// s[j] = sum over i < rows of dy[i n + j], in double, for j < n, where simd_short_rows<T>(n).
// dy is read as one flat array, a vector at a time, into sums of whole periods (lcm(n, lanes)
// entries, 4 vectors or more); each column's sum is then gathered from them in a fixed order.
template <class T>
void sum_short_rows(const T* dy, std::int64_t rows, std::int64_t n, double* s);

}  // namespace distop::kernels::detail
