#include "distop/kernels/arithmetic.hpp"

#include <Kokkos_Core.hpp>

namespace distop::kernels {

namespace {

// The row length n of b against a (see the header), checked.
template <class T>
std::int64_t row_operand(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c,
                         const char* op) {
  const std::int64_t n = b.numel();
  DISTOP_CHECK(n == 0 ? a.numel() == 0 : a.numel() % n == 0, op, "the second operand ",
               b.shape().str(), " neither matches ", a.shape().str(),
               " nor divides it into rows of its length");
  DISTOP_CHECK(c.numel() == a.numel(), op, "the output ", c.shape().str(), " does not match ",
               a.shape().str());
  return n;
}

// Calls f(i, j) for every entry i of a tensor of `numel` entries, j being the entry of its row
// operand of length n: one flat range where j is i (or 0), rows by columns otherwise (no division
// per entry). f is a functor, which a device kernel can call on every Kokkos backend.
template <class F>
void for_each_entry(const char* name, std::int64_t numel, std::int64_t n, const F& f) {
  if (numel == 0) return;
  if (n == numel) {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace>(0, numel), KOKKOS_LAMBDA(std::int64_t i) { f(i, i); });
  } else if (n == 1) {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace>(0, numel), KOKKOS_LAMBDA(std::int64_t i) { f(i, 0); });
  } else {
    using Policy =
        Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>, Kokkos::IndexType<std::int64_t>>;
    Kokkos::parallel_for(
        name, Policy({0, 0}, {numel / n, n}),
        KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) { f(r * n + j, j); });
  }
}

template <class T>
struct AddF {
  typename Tensor<T>::View a, b, c;
  T alpha;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j) const {
    c(i) = a(i) + alpha * b(j);
  }
};

template <class T>
struct MulF {
  typename Tensor<T>::View a, b, c;
  T alpha, beta;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j) const {
    const T v = alpha * a(i) * b(j);
    c(i) = beta == T(0) ? v : v + beta * c(i);
  }
};

}  // namespace

template <class T>
void add(const Tensor<T>& a, T alpha, const Tensor<T>& b, Tensor<T>& c) {
  const std::int64_t n = row_operand(a, b, c, "add");
  for_each_entry("distop::add", a.numel(), n, AddF<T>{a.view(), b.view(), c.view(), alpha});
}

template <class T>
void mul(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c) {
  const std::int64_t n = row_operand(a, b, c, "mul");
  for_each_entry("distop::mul", a.numel(), n, MulF<T>{a.view(), b.view(), c.view(), alpha, beta});
}

template <class T>
void scaled_add(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y) {
  DISTOP_CHECK(x.numel() == y.numel(), "scaled_add", "element counts differ: ", x.shape().str(),
               " and ", y.shape().str());
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::scaled_add", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        yv(i) = beta == T(0) ? alpha * xv(i) : alpha * xv(i) + beta * yv(i);
      });
}

#define DISTOP_INSTANTIATE(T)                                              \
  template void add(const Tensor<T>&, T, const Tensor<T>&, Tensor<T>&);    \
  template void mul(T, const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&); \
  template void scaled_add(T, const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
