#include "distop/kernels/elementwise.hpp"

#include <Kokkos_Core.hpp>
#include <cstring>
#include <type_traits>

#include "host/fast_path.hpp"
#include "kokkos_math.hpp"
#include "space.hpp"
#include "tuning.hpp"

namespace distop::kernels {

namespace {

template <class T>
void check_counts(const Tensor<T>& a, const Tensor<T>& b, const char* op) {
  DISTOP_CHECK(a.numel() == b.numel(), op, "element counts differ: ", a.shape().str(), " and ",
               b.shape().str());
}

// The activations and their derivatives as functors, which (unlike lambdas handed from function
// to function) are callable inside device kernels on every Kokkos backend.
struct Relu {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return x < T(0) ? T(0) : x;  // a NaN passes on (x > 0 ? x : 0 would make it 0)
  }
};
struct ReluGrad {  // from the input x
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x, T dy) const {
    return x > T(0) ? dy : T(0);
  }
};
struct Sigmoid {
  // exp of a non-positive argument only, so that no intermediate overflows.
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + kmath::exp(-x));
    const T e = kmath::exp(x);
    return e / (T(1) + e);
  }
};
struct SigmoidGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy * y * (T(1) - y);
  }
};
struct Tanh {
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T x) const {
    return kmath::tanh(x);
  }
};
struct TanhGrad {  // from the output y
  template <class T>
  KOKKOS_INLINE_FUNCTION T operator()(T y, T dy) const {
    return dy * (T(1) - y * y);
  }
};

// y = f(x)
template <class T, class F>
void map(const char* op, const Tensor<T>& x, Tensor<T>& y, F f) {
  check_counts(x, y, op);
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      op, Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) = f(xv(i)); });
}

// dx = g(saved, dy)
template <class T, class G>
void map_grad(const char* op, const Tensor<T>& saved, const Tensor<T>& dy, Tensor<T>& dx, G g) {
  check_counts(saved, dy, op);
  check_counts(saved, dx, op);
  auto sv = saved.view();
  auto dyv = dy.view();
  auto dxv = dx.view();
  Kokkos::parallel_for(
      op, Kokkos::RangePolicy<ExecSpace>(0, saved.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { dxv(i) = g(sv(i), dyv(i)); });
}

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

}  // namespace

template <class T>
void relu(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::relu", x, y, Relu{});
}
template <class T>
void relu_backward(const Tensor<T>& x, const Tensor<T>& dy, Tensor<T>& dx) {
  map_grad("distop::relu_backward", x, dy, dx, ReluGrad{});
}
template <class T>
void sigmoid(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::sigmoid", x, y, Sigmoid{});
}
template <class T>
void sigmoid_backward(const Tensor<T>& y, const Tensor<T>& dy, Tensor<T>& dx) {
  map_grad("distop::sigmoid_backward", y, dy, dx, SigmoidGrad{});
}
template <class T>
void tanh(const Tensor<T>& x, Tensor<T>& y) {
  map("distop::tanh", x, y, Tanh{});
}
template <class T>
void tanh_backward(const Tensor<T>& y, const Tensor<T>& dy, Tensor<T>& dx) {
  map_grad("distop::tanh_backward", y, dy, dx, TanhGrad{});
}

namespace {
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

#define DISTOP_INSTANTIATE(T)                                                     \
  template void relu(const Tensor<T>&, Tensor<T>&);                               \
  template void relu_backward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);    \
  template void sigmoid(const Tensor<T>&, Tensor<T>&);                            \
  template void sigmoid_backward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&); \
  template void tanh(const Tensor<T>&, Tensor<T>&);                               \
  template void tanh_backward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);    \
  template void add_row_vector(Tensor<T>&, const Tensor<T>&);                     \
  template void fill_rows(Tensor<T>&, const Tensor<T>&);                          \
  template void sum_rows(const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
