#include "distop/kernels/group_norm.hpp"

#include <Kokkos_Core.hpp>

#include "team.hpp"

namespace distop::kernels {

namespace {

// The extents of x [n, C, s] with C a multiple of groups.
struct Dims {
  std::int64_t n, c, s, groups, per_group;
  std::int64_t rows() const { return n * groups; }
  std::int64_t row_length() const { return per_group * s; }
};

template <class T>
Dims dims_of(const Tensor<T>& x, std::int64_t groups, const char* op) {
  DISTOP_CHECK(x.rank() == 3, op, "expected a tensor of shape [n, C, s], found ", x.shape().str());
  DISTOP_CHECK(groups >= 1 && x.extent(1) % groups == 0, op, "the ", x.extent(1),
               " channels do not fall into ", groups, " groups");
  return {x.extent(0), x.extent(1), x.extent(2), groups, x.extent(1) / groups};
}

template <class T>
void check_same(const Tensor<T>& x, const Tensor<T>& other, const char* op, const char* what) {
  DISTOP_CHECK(other.shape() == x.shape(), op, what, " has shape ", other.shape().str(),
               ", expected ", x.shape().str());
}

void check_pairs(const Tensor<double>& t, std::int64_t rows, const char* op, const char* what) {
  DISTOP_CHECK(t.rank() == 2 && t.extent(0) == rows && t.extent(1) == 2, op, what, " has shape ",
               t.shape().str(), ", expected [", rows, ", 2]");
}

template <class T>
void check_channels(const Tensor<T>& v, std::int64_t c, bool may_be_empty, const char* op,
                    const char* what) {
  DISTOP_CHECK((may_be_empty && v.numel() == 0) || (v.rank() == 1 && v.extent(0) == c), op, what,
               " has shape ", v.shape().str(), ", expected [", c, "]",
               may_be_empty ? " or empty" : "");
}

}  // namespace

template <class T>
void group_norm_forward(const Tensor<T>& x, std::int64_t groups, const Tensor<double>& stats,
                        const Tensor<T>& weight, const Tensor<T>& bias, Tensor<T>& y) {
  const char* op = "group_norm_forward";
  const Dims d = dims_of(x, groups, op);
  check_same(x, y, op, "y");
  check_pairs(stats, d.rows(), op, "stats");
  check_channels(weight, d.c, true, op, "weight");
  check_channels(bias, d.c, true, op, "bias");
  const bool has_w = weight.numel() > 0, has_b = bias.numel() > 0;
  const std::int64_t m = d.row_length(), s = d.s, per = d.per_group, g = d.groups;
  auto xv = x.view();
  auto yv = y.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto bv = bias.view();
  Kokkos::parallel_for(
      "distop::group_norm_forward", team_per_row(d.rows(), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * m, c0 = (r % g) * per;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        team_for(team, m, [&](const std::int64_t j) {
          const std::int64_t c = c0 + j / s;
          double v = (static_cast<double>(xv(base + j)) - mean) * invstd;
          if (has_w) v *= static_cast<double>(wv(c));
          if (has_b) v += static_cast<double>(bv(c));
          yv(base + j) = static_cast<T>(v);
        });
      });
}

template <class T>
void group_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                              const Tensor<double>& stats, const Tensor<T>& weight,
                              Tensor<double>& sums) {
  const char* op = "group_norm_backward_sums";
  const Dims d = dims_of(x, groups, op);
  check_same(x, dy, op, "dy");
  check_pairs(stats, d.rows(), op, "stats");
  check_pairs(sums, d.rows(), op, "sums");
  check_channels(weight, d.c, true, op, "weight");
  const bool has_w = weight.numel() > 0;
  const std::int64_t m = d.row_length(), s = d.s, per = d.per_group, g = d.groups;
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto out = sums.view();
  Kokkos::parallel_for(
      "distop::group_norm_backward_sums", team_per_row(d.rows(), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * m, c0 = (r % g) * per;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        auto grad = [&](const std::int64_t j) {
          const double v = static_cast<double>(gv(base + j));
          return has_w ? v * static_cast<double>(wv(c0 + j / s)) : v;
        };
        const double s0 = team_sum(team, m, grad);
        const double s1 = team_sum(team, m, [&](const std::int64_t j) {
          return grad(j) * (static_cast<double>(xv(base + j)) - mean) * invstd;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          out(2 * r) = s0;
          out(2 * r + 1) = s1;
        });
      });
}

template <class T>
void group_norm_backward_input(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                               const Tensor<double>& stats, const Tensor<T>& weight,
                               const Tensor<double>& sums, double count, T beta, Tensor<T>& dx) {
  const char* op = "group_norm_backward_input";
  const Dims d = dims_of(x, groups, op);
  check_same(x, dy, op, "dy");
  check_same(x, dx, op, "dx");
  check_pairs(stats, d.rows(), op, "stats");
  check_pairs(sums, d.rows(), op, "sums");
  check_channels(weight, d.c, true, op, "weight");
  DISTOP_CHECK(count > 0, op, "the row count must be positive, found ", count);
  const bool has_w = weight.numel() > 0;
  const std::int64_t m = d.row_length(), s = d.s, per = d.per_group, g = d.groups;
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto wv = weight.view();
  auto su = sums.view();
  auto dv = dx.view();
  Kokkos::parallel_for(
      "distop::group_norm_backward_input", team_per_row(d.rows(), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * m, c0 = (r % g) * per;
        const double mean = sv(2 * r), invstd = sv(2 * r + 1);
        const double m0 = su(2 * r) / count, m1 = su(2 * r + 1) / count;
        team_for(team, m, [&](const std::int64_t j) {
          const std::int64_t i = base + j;
          double v = static_cast<double>(gv(i));
          if (has_w) v *= static_cast<double>(wv(c0 + j / s));
          const double xhat = (static_cast<double>(xv(i)) - mean) * invstd;
          const T out = static_cast<T>(invstd * (v - m0 - xhat * m1));
          dv(i) = beta == T(0) ? out : out + beta * dv(i);
        });
      });
}

template <class T>
void group_norm_weight_grad(const Tensor<T>& dy, const Tensor<T>& x, std::int64_t groups,
                            const Tensor<double>& stats, T beta, Tensor<T>& dweight) {
  const char* op = "group_norm_weight_grad";
  const Dims d = dims_of(x, groups, op);
  check_same(x, dy, op, "dy");
  check_pairs(stats, d.rows(), op, "stats");
  check_channels(dweight, d.c, false, op, "dweight");
  const std::int64_t n = d.n, c = d.c, s = d.s, per = d.per_group, g = d.groups;
  auto xv = x.view();
  auto gv = dy.view();
  auto sv = stats.view();
  auto dw = dweight.view();
  Kokkos::parallel_for(
      "distop::group_norm_weight_grad", team_per_row(c, op), KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t ch = team.league_rank();
        const double sum = team_sum(team, n * s, [&](const std::int64_t t) {
          const std::int64_t i = t / s, k = t % s;
          const std::int64_t r = i * g + ch / per;
          const std::int64_t at = (i * c + ch) * s + k;
          return static_cast<double>(gv(at)) * (static_cast<double>(xv(at)) - sv(2 * r)) *
                 sv(2 * r + 1);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          dw(ch) = beta == T(0) ? static_cast<T>(sum) : static_cast<T>(sum) + beta * dw(ch);
        });
      });
}

template <class T>
void group_norm_bias_grad(const Tensor<T>& dy, T beta, Tensor<T>& dbias) {
  const char* op = "group_norm_bias_grad";
  DISTOP_CHECK(dy.rank() == 3, op, "expected dy of shape [n, C, s], found ", dy.shape().str());
  const std::int64_t n = dy.extent(0), c = dy.extent(1), s = dy.extent(2);
  check_channels(dbias, c, false, op, "dbias");
  auto gv = dy.view();
  auto db = dbias.view();
  Kokkos::parallel_for(
      "distop::group_norm_bias_grad", team_per_row(c, op), KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t ch = team.league_rank();
        const double sum = team_sum(team, n * s, [&](const std::int64_t t) {
          return static_cast<double>(gv(((t / s) * c + ch) * s + t % s));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          db(ch) = beta == T(0) ? static_cast<T>(sum) : static_cast<T>(sum) + beta * db(ch);
        });
      });
}

#define DISTOP_INSTANTIATE(T)                                                               \
  template void group_norm_forward(const Tensor<T>&, std::int64_t, const Tensor<double>&,   \
                                   const Tensor<T>&, const Tensor<T>&, Tensor<T>&);         \
  template void group_norm_backward_sums(const Tensor<T>&, const Tensor<T>&, std::int64_t,  \
                                         const Tensor<double>&, const Tensor<T>&,           \
                                         Tensor<double>&);                                  \
  template void group_norm_backward_input(const Tensor<T>&, const Tensor<T>&, std::int64_t, \
                                          const Tensor<double>&, const Tensor<T>&,          \
                                          const Tensor<double>&, double, T, Tensor<T>&);    \
  template void group_norm_weight_grad(const Tensor<T>&, const Tensor<T>&, std::int64_t,    \
                                       const Tensor<double>&, T, Tensor<T>&);               \
  template void group_norm_bias_grad(const Tensor<T>&, T, Tensor<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
