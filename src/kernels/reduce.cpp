#include "distop/kernels/reduce.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

template <class T>
double dot(const Tensor<T>& a, const Tensor<T>& b) {
  DISTOP_CHECK(a.numel() == b.numel(), "dot", "element counts differ: ", a.shape().str(), " and ",
               b.shape().str());
  auto av = a.view();
  auto bv = b.view();
  double s = 0;
  Kokkos::parallel_reduce(
      "distop::dot", Kokkos::RangePolicy<ExecSpace>(0, a.numel()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) {
        acc += static_cast<double>(av(i)) * static_cast<double>(bv(i));
      },
      s);
  return s;
}

template <class T>
double sum(const Tensor<T>& a) {
  auto av = a.view();
  double s = 0;
  Kokkos::parallel_reduce(
      "distop::sum", Kokkos::RangePolicy<ExecSpace>(0, a.numel()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) { acc += static_cast<double>(av(i)); }, s);
  return s;
}

template <class T>
double max_abs(const Tensor<T>& a) {
  auto av = a.view();
  double m = 0;
  Kokkos::parallel_reduce(
      "distop::max_abs", Kokkos::RangePolicy<ExecSpace>(0, a.numel()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) {
        const double v = static_cast<double>(av(i)) < 0 ? -static_cast<double>(av(i))
                                                        : static_cast<double>(av(i));
        if (v > acc) acc = v;
      },
      Kokkos::Max<double>(m));
  return m;
}

#define DISTOP_INSTANTIATE(T)                                  \
  template double dot(const Tensor<T>&, const Tensor<T>&);     \
  template double sum(const Tensor<T>&);                       \
  template double max_abs(const Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
