#pragma once
// Internal: the AVX-512 form of max pooling over windows that tile the last axis two wide (2x2
// stride-2 pooling, LeNet's), chosen at run time (kernels/simd.hpp).

#include <cstdint>

namespace distop::kernels::detail {

// Whether max_pool_row_2 runs on this CPU (AVX-512, within the cap of set_host_simd_cap).
bool simd_max_pool_2();

// Rows up to which max_pool_row_2 takes a window's input rows.
inline constexpr int kSimdPoolMaxRows = 8;

// One output row of a max pooling whose windows tile the last axis two wide (kernel = stride = 2
// there, no padding, every output inside): for o < m, y[o] = the max over the r_count input rows
// x + rows[q] (1 <= r_count <= kSimdPoolMaxRows, row-major tap order) of their entries 2o and
// 2o + 1, and argmax[o] = the index into x of the winner. Ties keep the first tap; a NaN, once
// taken, stays (the order of comparisons of the portable kernel, so the results are identical).
template <class T>
void max_pool_row_2(const T* x, const std::int64_t* rows, int r_count, std::int64_t m, T* y,
                    std::int64_t* argmax);

// A whole (n, c) plane of 2-D windows 2 x 2 with stride 2 and no offset, its out1 rows of m
// outputs each: output row o1 reads input rows 2 o1 and 2 o1 + 1 of in2 entries, the plane's first
// at x + base. As max_pool_row_2 row after row, without working out each row's inputs.
template <class T>
void max_pool_plane_2(const T* x, std::int64_t base, std::int64_t in2, std::int64_t out1,
                      std::int64_t m, T* y, std::int64_t* argmax);

}  // namespace distop::kernels::detail
