#include "distop/kernels/layer_norm.hpp"

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"
#include "team.hpp"

namespace distop::kernels {

namespace {

template <class T>
void check_rows(const Tensor<T>& x, const Tensor<T>& other, const char* op, const char* what) {
  DISTOP_CHECK(x.rank() == 2, op, "expected a tensor of shape [rows, n], found ", x.shape().str());
  DISTOP_CHECK(other.shape() == x.shape(), op, what, " has shape ", other.shape().str(),
               ", expected ", x.shape().str());
}

void check_pairs(const Tensor<double>& t, std::int64_t rows, const char* op, const char* what) {
  DISTOP_CHECK(t.rank() == 2 && t.extent(0) == rows && t.extent(1) == 2, op, what, " has shape ",
               t.shape().str(), ", expected [", rows, ", 2]");
}

template <class T>
void check_vector(const Tensor<T>& v, std::int64_t n, const char* op, const char* what) {
  DISTOP_CHECK(v.numel() == 0 || (v.rank() == 1 && v.extent(0) == n), op, what, " has shape ",
               v.shape().str(), ", expected [", n, "] or empty");
}

}  // namespace

template <class T>
void layer_norm_moments(const Tensor<T>& x, Tensor<double>& moments) {
  const char* op = "layer_norm_moments";
  check_rows(x, x, op, "x");
  check_pairs(moments, x.extent(0), op, "moments");
  const std::int64_t n = x.extent(1);
  auto xv = x.view();
  auto mv = moments.view();
  Kokkos::parallel_for(
      "distop::layer_norm_moments", team_per_row(x.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double sum = team_sum(
            team, n, [&](const std::int64_t j) { return static_cast<double>(xv(base + j)); });
        const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
        const double m2 = team_sum(team, n, [&](const std::int64_t j) {
          const double d = static_cast<double>(xv(base + j)) - mean;
          return d * d;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mv(2 * r) = mean;
          mv(2 * r + 1) = m2;
        });
      });
}

void layer_norm_stats(const Tensor<double>& parts, const std::vector<std::int64_t>& counts,
                      double eps, Tensor<double>& stats) {
  const char* op = "layer_norm_stats";
  const auto p = static_cast<std::int64_t>(counts.size());
  DISTOP_CHECK(stats.rank() == 2 && stats.extent(1) == 2, op, "stats has shape ",
               stats.shape().str(), ", expected [rows, 2]");
  const std::int64_t rows = stats.extent(0);
  DISTOP_CHECK(parts.numel() == p * rows * 2, op, "parts holds ", parts.numel(),
               " values, expected ", p, " parts of [", rows, ", 2]");
  std::int64_t total = 0;
  for (auto c : counts) {
    DISTOP_CHECK(c >= 0, op, "a part's count is negative: ", c);
    total += c;
  }
  DISTOP_CHECK(total >= 1, op, "the rows have no entries");
  std::vector<double> counts_d(counts.begin(), counts.end());
  const Tensor<double> cnt = Tensor<double>::from_vector(Shape{p}, counts_d);
  auto cv = cnt.view();
  auto pv = parts.view();
  auto sv = stats.view();
  Kokkos::parallel_for(
      "distop::layer_norm_stats", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(std::int64_t r) {
        double n = 0, mean = 0, m2 = 0;
        for (std::int64_t q = 0; q < p; ++q) {
          const double nq = cv(q);
          if (nq == 0) continue;
          const double mq = pv((q * rows + r) * 2);
          const double m2q = pv((q * rows + r) * 2 + 1);
          const double sum_n = n + nq;
          const double delta = mq - mean;
          mean += delta * nq / sum_n;
          m2 += m2q + delta * delta * n * nq / sum_n;
          n = sum_n;
        }
        sv(2 * r) = mean;
        sv(2 * r + 1) = 1.0 / kmath::sqrt(m2 / n + eps);
      });
}

template <class T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<double>& stats, const Tensor<T>& weight,
                        const Tensor<T>& bias, Tensor<T>& y) {
  const char* op = "layer_norm_forward";
  check_rows(x, y, op, "y");
  check_pairs(stats, x.extent(0), op, "stats");
  const std::int64_t n = x.extent(1);
  check_vector(weight, n, op, "weight");
  check_vector(bias, n, op, "bias");
  const bool has_w = weight.numel() > 0, has_b = bias.numel() > 0;
  auto xv = x.view();
  auto yv = y.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto bv = bias.view();
  Kokkos::parallel_for(
      "distop::layer_norm_forward", team_per_row(x.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        team_for(team, n, [&](const std::int64_t j) {
          double v = (static_cast<double>(xv(base + j)) - mean) * invstd;
          if (has_w) v *= static_cast<double>(wv(j));
          if (has_b) v += static_cast<double>(bv(j));
          yv(base + j) = static_cast<T>(v);
        });
      });
}

template <class T>
void layer_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                              const Tensor<T>& weight, Tensor<double>& sums) {
  const char* op = "layer_norm_backward_sums";
  check_rows(x, dy, op, "dy");
  check_pairs(stats, x.extent(0), op, "stats");
  check_pairs(sums, x.extent(0), op, "sums");
  const std::int64_t n = x.extent(1);
  check_vector(weight, n, op, "weight");
  const bool has_w = weight.numel() > 0;
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto out = sums.view();
  Kokkos::parallel_for(
      "distop::layer_norm_backward_sums", team_per_row(x.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        auto g = [&](const std::int64_t j) {
          const double d = static_cast<double>(gv(base + j));
          return has_w ? d * static_cast<double>(wv(j)) : d;
        };
        const double s0 = team_sum(team, n, g);
        const double s1 = team_sum(team, n, [&](const std::int64_t j) {
          return g(j) * (static_cast<double>(xv(base + j)) - mean) * invstd;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          out(2 * r) = s0;
          out(2 * r + 1) = s1;
        });
      });
}

template <class T>
void layer_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                               const Tensor<T>& weight, const Tensor<double>& sums, double count,
                               T beta, Tensor<T>& dx) {
  const char* op = "layer_norm_backward_input";
  check_rows(x, dy, op, "dy");
  check_rows(x, dx, op, "dx");
  check_pairs(stats, x.extent(0), op, "stats");
  check_pairs(sums, x.extent(0), op, "sums");
  const std::int64_t n = x.extent(1);
  check_vector(weight, n, op, "weight");
  DISTOP_CHECK(count > 0, op, "the row count must be positive, found ", count);
  const bool has_w = weight.numel() > 0;
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto su = sums.view();
  auto dv = dx.view();
  Kokkos::parallel_for(
      "distop::layer_norm_backward_input", team_per_row(x.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * n;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        const double m0 = su(2 * r) / count, m1 = su(2 * r + 1) / count;
        team_for(team, n, [&](const std::int64_t j) {
          const std::int64_t i = base + j;
          double g = static_cast<double>(gv(i));
          if (has_w) g *= static_cast<double>(wv(j));
          const double xhat = (static_cast<double>(xv(i)) - mean) * invstd;
          const T v = static_cast<T>(invstd * (g - m0 - xhat * m1));
          dv(i) = beta == T(0) ? v : v + beta * dv(i);
        });
      });
}

template <class T>
void layer_norm_weight_grad(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<double>& stats,
                            T beta, Tensor<T>& dweight) {
  const char* op = "layer_norm_weight_grad";
  check_rows(x, dy, op, "dy");
  check_pairs(stats, x.extent(0), op, "stats");
  const std::int64_t rows = x.extent(0), n = x.extent(1);
  DISTOP_CHECK(dweight.rank() == 1 && dweight.extent(0) == n, op, "dweight has shape ",
               dweight.shape().str(), ", expected [", n, "]");
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto dw = dweight.view();
  Kokkos::parallel_for(
      "distop::layer_norm_weight_grad", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(std::int64_t j) {
        double s = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          s += static_cast<double>(gv(r * n + j)) *
               (static_cast<double>(xv(r * n + j)) - sv(2 * r)) * sv(2 * r + 1);
        dw(j) = beta == T(0) ? static_cast<T>(s) : static_cast<T>(s) + beta * dw(j);
      });
}

#define DISTOP_INSTANTIATE(T)                                                                     \
  template void layer_norm_moments(const Tensor<T>&, Tensor<double>&);                            \
  template void layer_norm_forward(const Tensor<T>&, const Tensor<double>&, const Tensor<T>&,     \
                                   const Tensor<T>&, Tensor<T>&);                                 \
  template void layer_norm_backward_sums(const Tensor<T>&, const Tensor<T>&,                      \
                                         const Tensor<double>&, const Tensor<T>&,                 \
                                         Tensor<double>&);                                        \
  template void layer_norm_backward_input(const Tensor<T>&, const Tensor<T>&,                     \
                                          const Tensor<double>&, const Tensor<T>&,                \
                                          const Tensor<double>&, double, T, Tensor<T>&);          \
  template void layer_norm_weight_grad(const Tensor<T>&, const Tensor<T>&, const Tensor<double>&, \
                                       T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
