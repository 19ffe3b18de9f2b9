#include "distop/kernels/embedding.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

namespace {

template <class T>
void check_table(const Tensor<T>& indices, const Tensor<T>& table, const Tensor<T>& rows,
                 const char* op, const char* what) {
  DISTOP_CHECK(table.rank() == 2, op, "expected a table [rows, d], found ", table.shape().str());
  DISTOP_CHECK(
      rows.rank() == 2 && rows.extent(0) == indices.numel() && rows.extent(1) == table.extent(1),
      op, what, " has shape ", rows.shape().str(), ", expected [", indices.numel(), ", ",
      table.extent(1), "]");
}

}  // namespace

template <class T>
std::int64_t first_invalid_index(const Tensor<T>& indices, std::int64_t limit) {
  auto iv = indices.view();
  const std::int64_t none = indices.numel();
  std::int64_t first = none;  // the reducer starts from its identity, the largest int64
  Kokkos::parallel_reduce(
      "distop::first_invalid_index", Kokkos::RangePolicy<ExecSpace>(0, indices.numel()),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & acc) {
        const double v = static_cast<double>(iv(i));
        const bool ok = v >= 0 && v < static_cast<double>(limit) &&
                        v == static_cast<double>(static_cast<std::int64_t>(v));
        if (!ok && i < acc) acc = i;
      },
      Kokkos::Min<std::int64_t>(first));
  return first >= none ? -1 : first;
}

template <class T>
void embedding_forward(const Tensor<T>& indices, const Tensor<T>& weight, std::int64_t offset,
                       Tensor<T>& y) {
  check_table(indices, weight, y, "embedding_forward", "y");
  const std::int64_t rows = weight.extent(0), d = weight.extent(1);
  auto iv = indices.view();
  auto wv = weight.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::embedding_forward", Kokkos::RangePolicy<ExecSpace>(0, y.numel()),
      KOKKOS_LAMBDA(std::int64_t e) {
        const std::int64_t i = e / d, j = e % d;
        const auto v = static_cast<std::int64_t>(iv(i)) - offset;
        yv(e) = v >= 0 && v < rows ? wv(v * d + j) : T(0);
      });
}

template <class T>
void embedding_backward(const Tensor<T>& indices, const Tensor<T>& dy, std::int64_t offset,
                        std::int64_t skip, T beta, Tensor<T>& dweight) {
  check_table(indices, dweight, dy, "embedding_backward", "dy");
  const std::int64_t rows = dweight.extent(0), d = dweight.extent(1), n = indices.numel();
  auto iv = indices.view();
  auto gv = dy.view();
  auto wv = dweight.view();
  // One column of the table per work item: no two items write one entry, and each entry sums its
  // contributions in the order of i (deterministic, no atomics).
  Kokkos::parallel_for(
      "distop::embedding_backward", Kokkos::RangePolicy<ExecSpace>(0, d),
      KOKKOS_LAMBDA(std::int64_t j) {
        for (std::int64_t v = 0; v < rows; ++v)
          wv(v * d + j) = beta == T(0) ? T(0) : beta * wv(v * d + j);
        for (std::int64_t i = 0; i < n; ++i) {
          const auto g = static_cast<std::int64_t>(iv(i));
          const std::int64_t v = g - offset;
          if (v >= 0 && v < rows && g != skip) wv(v * d + j) += gv(i * d + j);
        }
      });
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template std::int64_t first_invalid_index(const Tensor<T>&, std::int64_t);                       \
  template void embedding_forward(const Tensor<T>&, const Tensor<T>&, std::int64_t, Tensor<T>&);   \
  template void embedding_backward(const Tensor<T>&, const Tensor<T>&, std::int64_t, std::int64_t, \
                                   T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
