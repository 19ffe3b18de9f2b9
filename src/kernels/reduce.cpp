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

#define DISTOP_INSTANTIATE(T) template double dot(const Tensor<T>&, const Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
