#include "distop/kernels/transpose.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

template <class T>
void transpose(const Tensor<T>& x, T beta, Tensor<T>& y) {
  DISTOP_CHECK(
      x.rank() == 2 && y.rank() == 2 && y.extent(0) == x.extent(1) && y.extent(1) == x.extent(0),
      "transpose", "expected x [m, n] and y [n, m], found x ", x.shape().str(), " and y ",
      y.shape().str());
  const std::int64_t m = x.extent(0), n = x.extent(1);
  if (m == 0 || n == 0) return;
  DISTOP_CHECK(x.data() != y.data(), "transpose", "y aliases x");
  auto xv = x.view();
  auto yv = y.view();
  // Tiles of both index ranges, so that the strided side of the copy stays in cache.
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>;
  Kokkos::parallel_for(
      "distop::transpose", Policy({0, 0}, {m, n}), KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
        const T v = xv(i * n + j);
        yv(j * m + i) = beta == T(0) ? v : v + beta * yv(j * m + i);
      });
}

template void transpose(const Tensor<float>&, float, Tensor<float>&);
template void transpose(const Tensor<double>&, double, Tensor<double>&);

}  // namespace distop::kernels
