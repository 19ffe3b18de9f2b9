#include "distop/kernels/normalize.hpp"

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"
#include "team.hpp"

namespace distop::kernels {

namespace {

template <class T>
void check_rows(const Tensor<T>& x, const Tensor<T>& other, const Tensor<double>& norms,
                const char* op, const char* what) {
  DISTOP_CHECK(x.rank() == 2, op, "expected a tensor of shape [rows, n], found ", x.shape().str());
  DISTOP_CHECK(other.shape() == x.shape(), op, what, " has shape ", other.shape().str(),
               ", expected ", x.shape().str());
  DISTOP_CHECK(norms.rank() == 1 && norms.extent(0) == x.extent(0), op, "norms has shape ",
               norms.shape().str(), ", expected [", x.extent(0), "]");
}

}  // namespace

template <class T>
void normalize_rows(const Tensor<T>& x, double eps, Tensor<T>& y, Tensor<double>& norms) {
  const char* op = "normalize_rows";
  check_rows(x, y, norms, op, "y");
  const std::int64_t n = x.extent(1);
  auto xv = x.view();
  auto yv = y.view();
  auto nv = norms.view();
  Kokkos::parallel_for(
      "distop::normalize_rows", team_per_row(x.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double squares = team_sum(team, n, [&](const std::int64_t j) {
          const double v = static_cast<double>(xv(base + j));
          return v * v;
        });
        const double norm = kmath::sqrt(squares);
        const double denominator = norm > eps ? norm : eps;
        team_for(team, n, [&](const std::int64_t j) {
          yv(base + j) = static_cast<T>(static_cast<double>(xv(base + j)) / denominator);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { nv(r) = norm; });
      });
}

template <class T>
void normalize_rows_backward(const Tensor<T>& y, const Tensor<T>& dy, const Tensor<double>& norms,
                             double eps, T beta, Tensor<T>& dx) {
  const char* op = "normalize_rows_backward";
  check_rows(y, dy, norms, op, "dy");
  check_rows(y, dx, norms, op, "dx");
  const std::int64_t n = y.extent(1);
  auto yv = y.view();
  auto gv = dy.view();
  auto dv = dx.view();
  auto nv = norms.view();
  Kokkos::parallel_for(
      "distop::normalize_rows_backward", team_per_row(y.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double norm = nv(r);
        // torch divides by clamp_min(norm, eps), whose gradient passes where norm >= eps: there
        // the norm's derivative counts; below, the denominator is the constant eps.
        const bool through_norm = norm >= eps;
        const double dot = through_norm ? team_sum(team, n,
                                                   [&](const std::int64_t j) {
                                                     return static_cast<double>(yv(base + j)) *
                                                            static_cast<double>(gv(base + j));
                                                   })
                                        : 0.0;
        team_for(team, n, [&](const std::int64_t j) {
          const std::int64_t i = base + j;
          const double g = static_cast<double>(gv(i));
          const T v = static_cast<T>(through_norm ? (g - static_cast<double>(yv(i)) * dot) / norm
                                                  : g / eps);
          dv(i) = beta == T(0) ? v : v + beta * dv(i);
        });
      });
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template void normalize_rows(const Tensor<T>&, double, Tensor<T>&, Tensor<double>&);             \
  template void normalize_rows_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<double>&, \
                                        double, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
