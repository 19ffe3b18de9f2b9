#include "distop/kernels/elementwise.hpp"

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"

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
    return x > T(0) ? x : T(0);
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

template <class T>
void add_row_vector(Tensor<T>& y, const Tensor<T>& b) {
  const std::int64_t n = row_length(y, b, "add_row_vector", "y", "b");
  auto yv = y.view();
  auto bv = b.view();
  Kokkos::parallel_for(
      "distop::add_row_vector", Kokkos::RangePolicy<ExecSpace>(0, y.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) += bv(i % n); });
}

template <class T>
void sum_rows(const Tensor<T>& dy, T beta, Tensor<T>& db) {
  const std::int64_t n = row_length(dy, db, "sum_rows", "dy", "db");
  const std::int64_t rows = dy.extent(0);
  auto dyv = dy.view();
  auto dbv = db.view();
  Kokkos::parallel_for(
      "distop::sum_rows", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(std::int64_t j) {
        double s = 0;
        for (std::int64_t i = 0; i < rows; ++i) s += static_cast<double>(dyv(i * n + j));
        dbv(j) = beta == T(0) ? static_cast<T>(s) : static_cast<T>(s + beta * dbv(j));
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
  template void sum_rows(const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
