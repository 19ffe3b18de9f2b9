#include "distop/kernels/elementwise.hpp"

// The bias rows of kernels/elementwise.hpp: the portable forms, each behind its host fast path
// (host/rows.cpp).

#include <Kokkos_Core.hpp>

#include "host/fast_path.hpp"
#include "space.hpp"
#include "tuning.hpp"

namespace distop::kernels {

namespace {

// Columns per work item of sum_rows (tuning.hpp).
constexpr int kSumTile = kTuning.sum_tile;

// s[c] = the sum over rows i of dy[i, j0 + c], c < W, of a row-major dy with n columns, in
// double: the even rows and the odd rows are summed in row order into two partial sums, which are
// then added (two independent chains of adds per column, so that a narrow tile is not bound by
// the latency of one).
template <int W, class View>
KOKKOS_INLINE_FUNCTION void sum_columns(const View& dy, std::int64_t rows, std::int64_t n,
                                        std::int64_t j0, double* s) {
  double even[W] = {};
  double odd[W] = {};
  std::int64_t i = 0;
  for (; i + 1 < rows; i += 2)
    for (int c = 0; c < W; ++c) {
      even[c] += static_cast<double>(dy(i * n + j0 + c));
      odd[c] += static_cast<double>(dy((i + 1) * n + j0 + c));
    }
  if (i < rows)
    for (int c = 0; c < W; ++c) even[c] += static_cast<double>(dy(i * n + j0 + c));
  for (int c = 0; c < W; ++c) s[c] = even[c] + odd[c];
}

template <class T>
std::int64_t row_length(const Tensor<T>& y, const Tensor<T>& b, const char* op, const char* yn,
                        const char* bn) {
  DISTOP_CHECK(y.rank() == 2 && b.rank() == 1 && b.extent(0) == y.extent(1), op, "expected ", yn,
               " of shape [rows, n] and ", bn, " of shape [n], found ", yn, " ", y.shape().str(),
               " and ", bn, " ", b.shape().str());
  return y.extent(1);
}

// (row, column) of a [rows, n] tensor, the column along memory (Iterate::Right).
using RowsPolicy =
    Kokkos::MDRangePolicy<ExecSpace,
                          Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                          Kokkos::IndexType<std::int64_t>>;
}  // namespace

template <class T>
void add_row_vector(Tensor<T>& y, const Tensor<T>& b) {
  const std::int64_t n = row_length(y, b, "add_row_vector", "y", "b");
  const std::int64_t rows = y.extent(0);
  if (n == 0 || rows == 0) return;
  if (host_fast_path::add_row_vector(y.data(), b.data(), rows, n)) return;
  auto yv = y.view();
  auto bv = b.view();
  // One entry per thread, over (row, column) with the column along memory: neighbouring GPU
  // threads touch neighbouring entries, and the host's inner loop runs along a row.
  Kokkos::parallel_for(
      "distop::add_row_vector", RowsPolicy({0, 0}, {rows, n}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { yv(i * n + j) += bv(j); });
}

template <class T>
void fill_rows(Tensor<T>& y, const Tensor<T>& b) {
  const std::int64_t n = row_length(y, b, "fill_rows", "y", "b");
  const std::int64_t rows = y.extent(0);
  if (n == 0 || rows == 0) return;
  if (host_fast_path::fill_rows(y.data(), b.data(), rows, n)) return;
  auto yv = y.view();
  auto bv = b.view();
  Kokkos::parallel_for(
      "distop::fill_rows", RowsPolicy({0, 0}, {rows, n}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { yv(i * n + j) = bv(j); });
}

template <class T>
void sum_rows(const Tensor<T>& dy, T beta, Tensor<T>& db) {
  const std::int64_t n = row_length(dy, db, "sum_rows", "dy", "db");
  const std::int64_t rows = dy.extent(0);
  if (n > 0 && rows > 0 && host_fast_path::sum_rows(dy.data(), rows, n, beta, db.data())) return;
  auto dyv = dy.view();
  auto dbv = db.view();
  // Each work item sums a tile of adjacent columns, row after row, so that on the host its inner
  // loops read contiguous entries into independent accumulators (one column alone is a chain of
  // dependent adds over strided entries, which cost more than the GEMMs of a narrow layer's
  // backward). A tile narrower than kSumTile (the last, or all of a layer with few outputs) is
  // summed in pieces of fixed widths, so that every inner loop has a constant trip count. Each
  // column is summed in double, in a fixed order (sum_columns).
  Kokkos::parallel_for(
      "distop::sum_rows", Kokkos::RangePolicy<ExecSpace>(0, (n + kSumTile - 1) / kSumTile),
      KOKKOS_LAMBDA(std::int64_t t) {
        const std::int64_t j0 = t * kSumTile;
        const std::int64_t w = n - j0 < kSumTile ? n - j0 : kSumTile;
        double s[kSumTile];
        std::int64_t c = 0;
        if (w == kSumTile) {
          sum_columns<kSumTile>(dyv, rows, n, j0, s);
        } else if constexpr (kSumTile > 1) {
          static_assert(kSumTile <= 16, "the pieces below cover at most 15 columns");
          if (w - c >= 8) {
            sum_columns<8>(dyv, rows, n, j0 + c, s + c);
            c += 8;
          }
          if (w - c >= 4) {
            sum_columns<4>(dyv, rows, n, j0 + c, s + c);
            c += 4;
          }
          if (w - c >= 2) {
            sum_columns<2>(dyv, rows, n, j0 + c, s + c);
            c += 2;
          }
          if (w - c >= 1) sum_columns<1>(dyv, rows, n, j0 + c, s + c);
        }
        for (c = 0; c < w; ++c)
          dbv(j0 + c) =
              beta == T(0) ? static_cast<T>(s[c]) : static_cast<T>(s[c] + beta * dbv(j0 + c));
      });
}

#define DISTOP_INSTANTIATE(T)                                 \
  template void add_row_vector(Tensor<T>&, const Tensor<T>&); \
  template void fill_rows(Tensor<T>&, const Tensor<T>&);      \
  template void sum_rows(const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
