#include "distop/kernels/elementwise.hpp"

// The arithmetic of kernels/elementwise.hpp: two tensors, the second broadcast against the first
// by torch's rules, and the adjoint of that broadcast (sum_to).

#include <Kokkos_Core.hpp>
#include <utility>
#include <vector>

#include "distop/kernels/reduce.hpp"

namespace distop::kernels {

namespace {

constexpr int kMaxAxes = 8;
using Extents = Kokkos::Array<std::int64_t, kMaxAxes>;

// How b is read for each entry of a: a's shape with a's axes of extent 1 dropped and adjacent axes
// of one kind merged into one, the kinds being "b has a's extent" and "b broadcasts" (extent 1 or
// missing). Along a merged axis b advances by its stride, 0 where it broadcasts. The kinds then
// alternate, so a bias row [n] against [rows, n] is two merged axes, b's strides {0, 1}, and a
// column [rows, 1] against it {1, 0}.
struct Pattern {
  int rank = 0;
  Extents extent{};
  Extents b_stride{};
  std::int64_t numel = 0;  // a's
  bool same = false;       // no axis broadcasts: b's entry i meets a's entry i
};

Pattern broadcast_pattern(const Shape& a, const Shape& b, const char* op) {
  const int ra = a.rank();
  const int rb = b.rank();
  bool fits = rb <= ra;
  for (int j = 0; fits && j < rb; ++j) fits = b[j] == a[j + ra - rb] || b[j] == 1;
  DISTOP_CHECK(fits, op, "the second operand's shape ", b.str(), " does not broadcast against ",
               a.str(),
               " (torch's rules: its axes aligned with the trailing ones, each of the same "
               "extent or 1, none more)");
  std::vector<std::pair<std::int64_t, bool>> merged;  // (extent, b broadcasts), outermost first
  for (int i = 0; i < ra; ++i) {
    if (a[i] == 1) continue;
    const int j = i - (ra - rb);
    const bool broadcast = j < 0 || b[j] == 1;
    if (!merged.empty() && merged.back().second == broadcast)
      merged.back().first *= a[i];
    else
      merged.emplace_back(a[i], broadcast);
  }
  DISTOP_CHECK(static_cast<int>(merged.size()) <= kMaxAxes, op, "more than ", kMaxAxes,
               " alternations of broadcast and matching axes between ", a.str(), " and ", b.str());
  Pattern p;
  p.rank = static_cast<int>(merged.size());
  p.numel = a.numel();
  std::int64_t stride = 1;
  for (int k = p.rank - 1; k >= 0; --k) {
    const auto [e, broadcast] = merged[static_cast<std::size_t>(k)];
    p.extent[k] = e;
    p.b_stride[k] = broadcast ? 0 : stride;
    if (!broadcast) stride *= e;
  }
  p.same = p.rank == 0 || (p.rank == 1 && p.b_stride[0] == 1);
  return p;
}

template <class T>
void check_output(const Tensor<T>& a, const Tensor<T>& c, const char* op) {
  DISTOP_CHECK(c.numel() == a.numel(), op, "the output ", c.shape().str(), " does not match ",
               a.shape().str());
}

// Calls f(i, j) for every entry i of a, j being the entry of b it meets. Flat where b is a's shape
// or one scalar; over the merged axes where they are two or three (a bias row, a column, or a
// middle axis broadcast), with no division per entry; decoded entry by entry beyond. f is a
// functor, which a device kernel can call on every Kokkos backend.
template <class F>
void for_each_pair(const char* name, const Pattern& p, const F& f) {
  if (p.numel == 0) return;
  using Index = Kokkos::IndexType<std::int64_t>;
  if (p.same) {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace, Index>(0, p.numel),
        KOKKOS_LAMBDA(std::int64_t i) { f(i, i); });
  } else if (p.rank == 1) {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace, Index>(0, p.numel),
        KOKKOS_LAMBDA(std::int64_t i) { f(i, 0); });
  } else if (p.rank == 2) {
    using Policy = Kokkos::MDRangePolicy<
        ExecSpace, Kokkos::Rank<2, Kokkos::Iterate::Right, Kokkos::Iterate::Right>, Index>;
    const std::int64_t e1 = p.extent[1], s0 = p.b_stride[0], s1 = p.b_stride[1];
    Kokkos::parallel_for(
        name, Policy({0, 0}, {p.extent[0], e1}),
        KOKKOS_LAMBDA(std::int64_t r, std::int64_t k) { f(r * e1 + k, r * s0 + k * s1); });
  } else if (p.rank == 3) {
    using Policy = Kokkos::MDRangePolicy<
        ExecSpace, Kokkos::Rank<3, Kokkos::Iterate::Right, Kokkos::Iterate::Right>, Index>;
    const std::int64_t e1 = p.extent[1], e2 = p.extent[2];
    const std::int64_t s0 = p.b_stride[0], s1 = p.b_stride[1], s2 = p.b_stride[2];
    Kokkos::parallel_for(
        name, Policy({0, 0, 0}, {p.extent[0], e1, e2}),
        KOKKOS_LAMBDA(std::int64_t q, std::int64_t r, std::int64_t k) {
          f((q * e1 + r) * e2 + k, q * s0 + r * s1 + k * s2);
        });
  } else {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace, Index>(0, p.numel), KOKKOS_LAMBDA(std::int64_t i) {
          std::int64_t rest = i;
          std::int64_t j = 0;
          for (int q = p.rank - 1; q >= 0; --q) {
            j += (rest % p.extent[q]) * p.b_stride[q];
            rest /= p.extent[q];
          }
          f(i, j);
        });
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

// c = alpha a b (+ beta c where Accumulate): two functors, so that the overwriting one neither
// reads c nor tests beta per entry.
template <class T, bool Accumulate>
struct MulF {
  typename Tensor<T>::View a, b, c;
  T alpha, beta;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j) const {
    const T v = alpha * a(i) * b(j);
    if constexpr (Accumulate)
      c(i) = v + beta * c(i);
    else
      c(i) = v;
  }
};

template <class T, bool Accumulate>
struct DivF {
  typename Tensor<T>::View a, b, c;
  T alpha, beta;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i, std::int64_t j) const {
    const T v = alpha * a(i) / b(j);
    if constexpr (Accumulate)
      c(i) = v + beta * c(i);
    else
      c(i) = v;
  }
};

}  // namespace

template <class T>
void add(const Tensor<T>& a, T alpha, const Tensor<T>& b, Tensor<T>& c) {
  const Pattern p = broadcast_pattern(a.shape(), b.shape(), "add");
  check_output(a, c, "add");
  for_each_pair("distop::add", p, AddF<T>{a.view(), b.view(), c.view(), alpha});
}

template <class T>
void mul(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c) {
  const Pattern p = broadcast_pattern(a.shape(), b.shape(), "mul");
  check_output(a, c, "mul");
  if (beta == T(0))
    for_each_pair("distop::mul", p, MulF<T, false>{a.view(), b.view(), c.view(), alpha, beta});
  else
    for_each_pair("distop::mul", p, MulF<T, true>{a.view(), b.view(), c.view(), alpha, beta});
}

template <class T>
void div(T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c) {
  const Pattern p = broadcast_pattern(a.shape(), b.shape(), "div");
  check_output(a, c, "div");
  if (beta == T(0))
    for_each_pair("distop::div", p, DivF<T, false>{a.view(), b.view(), c.view(), alpha, beta});
  else
    for_each_pair("distop::div", p, DivF<T, true>{a.view(), b.view(), c.view(), alpha, beta});
}

template <class T>
void add_scalar(const Tensor<T>& x, T s, Tensor<T>& y) {
  check_output(x, y, "add_scalar");
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::add_scalar", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { yv(i) = xv(i) + s; });
}

template <class T>
void scaled_add(T alpha, const Tensor<T>& x, T beta, Tensor<T>& y) {
  check_output(x, y, "scaled_add");
  auto xv = x.view();
  auto yv = y.view();
  const Kokkos::RangePolicy<ExecSpace> all(0, x.numel());
  if (beta == T(0))
    Kokkos::parallel_for(
        "distop::scaled_add", all, KOKKOS_LAMBDA(std::int64_t i) { yv(i) = alpha * xv(i); });
  else
    Kokkos::parallel_for(
        "distop::scaled_add", all,
        KOKKOS_LAMBDA(std::int64_t i) { yv(i) = alpha * xv(i) + beta * yv(i); });
}

template <class T>
void sum_to(const Tensor<T>& dy, T alpha, T beta, Tensor<T>& db, const Tensor<T>* weight) {
  const char* op = "sum_to";
  const Pattern p = broadcast_pattern(dy.shape(), db.shape(), op);
  if (weight)
    DISTOP_CHECK(weight->numel() == dy.numel(), op, "weight ", weight->shape().str(),
                 " does not match ", dy.shape().str());
  if (p.same) {  // nothing to sum: entry by entry
    if (weight)
      mul(alpha, dy, *weight, beta, db);
    else
      scaled_add(alpha, dy, beta, db);
    return;
  }
  std::vector<std::int64_t> extents(p.extent.data(), p.extent.data() + p.rank);
  if (!weight && alpha == T(1) && p.rank == 2 && p.b_stride[0] == 0) {
    // A bias row's gradient: the row sums, with their host fast path.
    Tensor<T> row = db.reshaped(Shape{extents[1]});
    sum_rows(dy.reshaped(Shape(extents)), beta, row);
    return;
  }
  std::vector<int> axes;
  for (int k = 0; k < p.rank; ++k)
    if (p.b_stride[k] == 0) axes.push_back(k);
  const Shape merged(std::move(extents));
  const Tensor<T> w = weight ? weight->reshaped(merged) : Tensor<T>();
  sum_axes(dy.reshaped(merged), axes, alpha, beta, db, weight ? &w : nullptr);
}

#define DISTOP_INSTANTIATE(T)                                              \
  template void add(const Tensor<T>&, T, const Tensor<T>&, Tensor<T>&);    \
  template void mul(T, const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&); \
  template void div(T, const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&); \
  template void add_scalar(const Tensor<T>&, T, Tensor<T>&);               \
  template void scaled_add(T, const Tensor<T>&, T, Tensor<T>&);            \
  template void sum_to(const Tensor<T>&, T, T, Tensor<T>&, const Tensor<T>*);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
