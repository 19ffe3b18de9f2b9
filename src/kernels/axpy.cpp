#include "distop/kernels/axpy.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

namespace {
template <class T>
void check_counts(const Tensor<T>& x, const Tensor<T>& y, const char* op) {
  DISTOP_CHECK(x.numel() == y.numel(), op, "element counts differ: ", x.shape().str(), " and ",
               y.shape().str());
}
}  // namespace

template <class T>
void axpy(T alpha, const Tensor<T>& x, Tensor<T>& y) {
  check_counts(x, y, "axpy");
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::axpy", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) += alpha * xv(i); });
}

template <class T>
void axpby(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y) {
  check_counts(x, y, "axpby");
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::axpby", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) = alpha * xv(i) + beta * yv(i); });
}

template <class T>
void scale(T alpha, Tensor<T>& x) {
  auto xv = x.view();
  Kokkos::parallel_for(
      "distop::scale", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { xv(i) *= alpha; });
}

#define DISTOP_INSTANTIATE(T)                                   \
  template void axpy(T, const Tensor<T>&, Tensor<T>&);          \
  template void axpby(T, const Tensor<T>&, T, Tensor<T>&);      \
  template void scale(T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
