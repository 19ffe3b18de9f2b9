#include "distop/kernels/reduce.hpp"

#include <Kokkos_Core.hpp>
#include <utility>

#include "team.hpp"

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

namespace {

constexpr int kMaxAxes = 8;
using Extents = Kokkos::Array<std::int64_t, kMaxAxes>;

// x's shape with adjacent axes of one kind (kept or summed over) merged into one axis and axes of
// extent 1 dropped: the same sum over fewer, longer axes. Per merged axis: its extent, its stride
// in x, and (kept axes only) its stride in out.
struct Merged {
  int kept = 0, summed = 0;  // how many merged axes of each kind
  Extents kept_extent{}, kept_stride{}, kept_out_stride{};
  Extents summed_extent{}, summed_stride{};
  std::int64_t out_count = 1, summed_count = 1;
  bool trailing_summed = false;  // the last merged axis is summed over (and is the only one, or
                                 // follows one kept axis): rows of x summed, one sum per row
};

Merged merge_axes(const Shape& shape, const std::vector<int>& axes, const char* op) {
  const int rank = shape.rank();
  std::vector<bool> summed(static_cast<std::size_t>(rank), false);
  int previous = -1;
  for (int a : axes) {
    DISTOP_CHECK(a > previous && a < rank, op, "axes must be distinct axes of ", shape.str(),
                 " in increasing order, found axis ", a, " after ", previous);
    summed[static_cast<std::size_t>(a)] = true;
    previous = a;
  }
  // Merged axes from the outermost, as (extent, summed).
  std::vector<std::pair<std::int64_t, bool>> m;
  for (int a = 0; a < rank; ++a) {
    const std::int64_t e = shape[a];
    const bool s = summed[static_cast<std::size_t>(a)];
    if (e == 1) continue;
    if (!m.empty() && m.back().second == s)
      m.back().first *= e;
    else
      m.emplace_back(e, s);
  }
  DISTOP_CHECK(static_cast<int>(m.size()) <= kMaxAxes, op, "more than ", kMaxAxes,
               " alternations of summed and kept axes in ", shape.str());
  Merged out;
  std::int64_t stride = 1;
  for (int k = static_cast<int>(m.size()) - 1; k >= 0; --k) {
    const auto [e, s] = m[static_cast<std::size_t>(k)];
    if (s) {
      out.summed_extent[out.summed] = e;
      out.summed_stride[out.summed] = stride;
      ++out.summed;
      out.summed_count *= e;
    } else {
      out.kept_extent[out.kept] = e;
      out.kept_stride[out.kept] = stride;
      out.kept_out_stride[out.kept] = out.out_count;
      ++out.kept;
      out.out_count *= e;
    }
    stride *= e;
  }
  // Collected innermost first: reverse to row-major order (outermost first).
  auto reverse = [](Extents& v, int n) {
    for (int i = 0; i < n / 2; ++i) {
      const std::int64_t t = v[i];
      v[i] = v[n - 1 - i];
      v[n - 1 - i] = t;
    }
  };
  reverse(out.kept_extent, out.kept);
  reverse(out.kept_stride, out.kept);
  reverse(out.kept_out_stride, out.kept);
  reverse(out.summed_extent, out.summed);
  reverse(out.summed_stride, out.summed);
  out.trailing_summed = !m.empty() && m.back().second && out.summed == 1 && out.kept <= 1;
  return out;
}

// The offset in x of kept index o (row-major over the kept axes).
KOKKOS_INLINE_FUNCTION std::int64_t kept_offset(const Merged& m, std::int64_t o) {
  std::int64_t base = 0;
  for (int q = m.kept - 1; q >= 0; --q) {
    base += (o % m.kept_extent[q]) * m.kept_stride[q];
    o /= m.kept_extent[q];
  }
  return base;
}

}  // namespace

template <class T>
void sum_axes(const Tensor<T>& x, const std::vector<int>& axes, T alpha, T beta, Tensor<T>& out,
              const Tensor<T>* weight) {
  const char* op = "sum_axes";
  const Merged m = merge_axes(x.shape(), axes, op);
  DISTOP_CHECK(out.numel() == m.out_count, op, "out ", out.shape().str(), " should hold ",
               m.out_count, " sums of ", x.shape().str());
  if (weight)
    DISTOP_CHECK(weight->numel() == x.numel(), op, "weight ", weight->shape().str(),
                 " does not match ", x.shape().str());
  if (m.out_count == 0) return;
  auto xv = x.view();
  auto wv = weight ? weight->view() : typename Tensor<T>::View();
  auto ov = out.view();
  const bool weighted = weight != nullptr;
  const double a = static_cast<double>(alpha);
  const double b = static_cast<double>(beta);
  if (m.kept == 0) {
    // One sum of everything: a reduction over all threads, its result left on the device.
    Kokkos::View<double, MemSpace> total("distop::sum_axes::total");
    Kokkos::parallel_reduce(
        "distop::sum_axes", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
        KOKKOS_LAMBDA(std::int64_t i, double& acc) {
          acc += static_cast<double>(xv(i)) * (weighted ? static_cast<double>(wv(i)) : 1.0);
        },
        total);
    Kokkos::parallel_for(
        "distop::sum_axes::store", Kokkos::RangePolicy<ExecSpace>(0, 1),
        KOKKOS_LAMBDA(std::int64_t) {
          ov(0) = static_cast<T>(beta == T(0) ? a * total() : a * total() + b * ov(0));
        });
  } else if (m.trailing_summed) {
    // Row sums: x as [rows, len], a team per row.
    const std::int64_t len = m.summed_count;
    Kokkos::parallel_for(
        "distop::sum_axes::rows", team_per_row(m.out_count, op),
        KOKKOS_LAMBDA(const TeamMember& team) {
          const std::int64_t r = team.league_rank();
          const std::int64_t base = r * len;
          const double sum = team_sum(team, len, [&](const std::int64_t j) {
            return static_cast<double>(xv(base + j)) *
                   (weighted ? static_cast<double>(wv(base + j)) : 1.0);
          });
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            ov(r) = static_cast<T>(beta == T(0) ? a * sum : a * sum + b * ov(r));
          });
        });
  } else {
    // A thread per sum, walking the summed axes as an odometer from the kept index's offset (on a
    // GPU, neighbouring threads read neighbouring entries when the innermost axis is kept).
    const std::int64_t len = m.summed_count;
    Kokkos::parallel_for(
        "distop::sum_axes", Kokkos::RangePolicy<ExecSpace>(0, m.out_count),
        KOKKOS_LAMBDA(std::int64_t o) {
          std::int64_t off = kept_offset(m, o);
          std::int64_t idx[kMaxAxes] = {};
          double acc = 0;
          for (std::int64_t t = 0; t < len; ++t) {
            acc += static_cast<double>(xv(off)) * (weighted ? static_cast<double>(wv(off)) : 1.0);
            for (int q = m.summed - 1; q >= 0; --q) {
              off += m.summed_stride[q];
              if (++idx[q] < m.summed_extent[q]) break;
              off -= m.summed_stride[q] * m.summed_extent[q];
              idx[q] = 0;
            }
          }
          ov(o) = static_cast<T>(beta == T(0) ? a * acc : a * acc + b * ov(o));
        });
  }
}

template <class T>
void broadcast_axes(const Tensor<T>& y, const std::vector<int>& axes, T alpha, T beta,
                    Tensor<T>& x) {
  const char* op = "broadcast_axes";
  const Merged m = merge_axes(x.shape(), axes, op);
  DISTOP_CHECK(y.numel() == m.out_count, op, "y ", y.shape().str(), " should hold ", m.out_count,
               " entries to repeat over ", x.shape().str());
  auto yv = y.view();
  auto xv = x.view();
  Kokkos::parallel_for(
      "distop::broadcast_axes", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        std::int64_t o = 0;
        for (int q = 0; q < m.kept; ++q)
          o += ((i / m.kept_stride[q]) % m.kept_extent[q]) * m.kept_out_stride[q];
        xv(i) = beta == T(0) ? alpha * yv(o) : alpha * yv(o) + beta * xv(i);
      });
}

#define DISTOP_INSTANTIATE(T)                                                         \
  template double dot(const Tensor<T>&, const Tensor<T>&);                            \
  template void sum_axes(const Tensor<T>&, const std::vector<int>&, T, T, Tensor<T>&, \
                         const Tensor<T>*);                                           \
  template void broadcast_axes(const Tensor<T>&, const std::vector<int>&, T, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
