#include "distop/kernels/softmax.hpp"

#include <Kokkos_Core.hpp>
#include <limits>

#include "kokkos_math.hpp"
#include "team.hpp"

namespace distop::kernels {

namespace {

using LabelView = Kokkos::View<std::int32_t*, MemSpace>;

template <class T>
void check_logits(const Tensor<T>& logits, const char* op) {
  DISTOP_CHECK(logits.rank() == 2, op, "expected logits of shape [rows, classes], found ",
               logits.shape().str());
}

template <class T>
void check_same_shape(const Tensor<T>& logits, const Tensor<T>& out, const char* op,
                      const char* what) {
  DISTOP_CHECK(out.shape() == logits.shape(), op, what, " has shape ", out.shape().str(),
               ", expected ", logits.shape().str());
}

// Checks the labels on the host, then copies them to where the kernels run.
LabelView upload_labels(const std::vector<std::int32_t>& labels, std::int64_t rows,
                        std::int64_t classes, const char* op) {
  DISTOP_CHECK(static_cast<std::int64_t>(labels.size()) == rows, op, "expected ", rows,
               " labels (one per row), found ", labels.size());
  for (std::size_t r = 0; r < labels.size(); ++r)
    DISTOP_CHECK(labels[r] >= 0 && labels[r] < classes, op, "label ", labels[r], " of row ", r,
                 " is out of range [0, ", classes, ")");
  LabelView v(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::labels"), labels.size());
  Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> src(
      labels.data(), labels.size());
  Kokkos::deep_copy(v, src);
  return v;
}

// The rows the row kernels visit: none when there are no classes (nothing to write, and no entry
// to take a row's maximum from).
template <class T>
std::int64_t rows_with_classes(const Tensor<T>& logits) {
  return logits.extent(1) == 0 ? 0 : logits.extent(0);
}

// The maximum of a row and the sum of exp(x - max) over it, in double.
struct RowStats {
  double max, sum_exp;
};

// The statistics of the row of x starting at `base` (classes >= 1 entries), the team's threads
// sharing the row; every thread of the team gets them. Returned by value, for the caller to capture
// by value: a statistic the write loop refers to by address stays in memory, and the reduction
// into it then stores every entry.
template <class V>
KOKKOS_INLINE_FUNCTION RowStats row_stats(const TeamMember& team, const V& x, std::int64_t base,
                                          std::int64_t classes) {
  const double max = team_max(
      team, classes, [&](const std::int64_t j) { return static_cast<double>(x(base + j)); });
  const double sum_exp = team_sum(team, classes, [&, max](const std::int64_t j) {
    return kmath::exp(static_cast<double>(x(base + j)) - max);
  });
  return {max, sum_exp};
}

}  // namespace

template <class T>
void softmax(const Tensor<T>& logits, Tensor<T>& probs) {
  check_logits(logits, "softmax");
  check_same_shape(logits, probs, "softmax", "probs");
  const std::int64_t classes = logits.extent(1);
  auto xv = logits.view();
  auto pv = probs.view();
  // Each thread writes the entries it read (probs may alias logits), after the team's reductions
  // have read the whole row.
  Kokkos::parallel_for(
      "distop::softmax", team_per_row(rows_with_classes(logits), "softmax"),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t base = team.league_rank() * classes;
        const RowStats stats = row_stats(team, xv, base, classes);
        const double max = stats.max, sum_exp = stats.sum_exp;
        team_for(team, classes, [&, max, sum_exp](const std::int64_t j) {
          pv(base + j) =
              static_cast<T>(kmath::exp(static_cast<double>(xv(base + j)) - max) / sum_exp);
        });
      });
}

template <class T>
void log_softmax(const Tensor<T>& logits, Tensor<T>& out) {
  check_logits(logits, "log_softmax");
  check_same_shape(logits, out, "log_softmax", "out");
  const std::int64_t classes = logits.extent(1);
  auto xv = logits.view();
  auto ov = out.view();
  Kokkos::parallel_for(
      "distop::log_softmax", team_per_row(rows_with_classes(logits), "log_softmax"),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t base = team.league_rank() * classes;
        const RowStats stats = row_stats(team, xv, base, classes);
        const double max = stats.max, sum_exp = stats.sum_exp;
        // (x - max) - log(sum), not x - (max + log(sum)): max + log(sum) rounds away the digits
        // of log(sum) below max's precision (all of log 2 once |max| reaches 1e17).
        const double log_sum = kmath::log(sum_exp);
        team_for(team, classes, [&, max, log_sum](const std::int64_t j) {
          ov(base + j) = static_cast<T>((static_cast<double>(xv(base + j)) - max) - log_sum);
        });
      });
}

template <class T>
void log_softmax_backward(const Tensor<T>& out, const Tensor<T>& dout, T beta, Tensor<T>& dx) {
  const char* op = "log_softmax_backward";
  check_logits(out, op);
  check_same_shape(out, dout, op, "dout");
  check_same_shape(out, dx, op, "dx");
  const std::int64_t classes = out.extent(1);
  auto ov = out.view();
  auto gv = dout.view();
  auto dv = dx.view();
  Kokkos::parallel_for(
      "distop::log_softmax_backward", team_per_row(out.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t base = team.league_rank() * classes;
        const double sum = team_sum(
            team, classes, [&](const std::int64_t j) { return static_cast<double>(gv(base + j)); });
        team_for(team, classes, [&](const std::int64_t j) {
          const std::int64_t i = base + j;
          const T v = static_cast<T>(static_cast<double>(gv(i)) -
                                     kmath::exp(static_cast<double>(ov(i))) * sum);
          dv(i) = beta == T(0) ? v : v + beta * dv(i);
        });
      });
}

template <class T>
void softmax_backward(const Tensor<T>& probs, const Tensor<T>& dprobs, T beta, Tensor<T>& dx) {
  const char* op = "softmax_backward";
  check_logits(probs, op);
  check_same_shape(probs, dprobs, op, "dprobs");
  check_same_shape(probs, dx, op, "dx");
  const std::int64_t classes = probs.extent(1);
  auto pv = probs.view();
  auto gv = dprobs.view();
  auto dv = dx.view();
  Kokkos::parallel_for(
      "distop::softmax_backward", team_per_row(probs.extent(0), op),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t base = team.league_rank() * classes;
        const double dot = team_sum(team, classes, [&](const std::int64_t j) {
          return static_cast<double>(pv(base + j)) * static_cast<double>(gv(base + j));
        });
        team_for(team, classes, [&](const std::int64_t j) {
          const std::int64_t i = base + j;
          const T v =
              static_cast<T>(static_cast<double>(pv(i)) * (static_cast<double>(gv(i)) - dot));
          dv(i) = beta == T(0) ? v : v + beta * dv(i);
        });
      });
}

template <class T>
double softmax_cross_entropy(const Tensor<T>& logits, const std::vector<std::int32_t>& labels,
                             Tensor<T>* probs) {
  const char* op = "softmax_cross_entropy";
  check_logits(logits, op);
  if (probs) {
    check_same_shape(logits, *probs, op, "probs");
    DISTOP_CHECK(probs->empty() || probs->data() != logits.data(), op,
                 "probs must not alias the logits");
  }
  const std::int64_t rows = logits.extent(0), classes = logits.extent(1);
  auto lv = upload_labels(labels, rows, classes, op);
  auto xv = logits.view();
  auto pv = probs ? probs->view() : typename Tensor<T>::View();
  const bool write_probs = probs != nullptr;
  double loss = 0;
  // One team per row; its row's term is added once, by one of its threads.
  Kokkos::parallel_reduce(
      "distop::softmax_cross_entropy", team_per_row(rows, op),
      KOKKOS_LAMBDA(const TeamMember& team, double& acc) {
        const std::int64_t r = team.league_rank();
        const std::int64_t base = r * classes;
        const RowStats stats = row_stats(team, xv, base, classes);
        const double max = stats.max, sum_exp = stats.sum_exp;
        if (write_probs)
          team_for(team, classes, [&, max, sum_exp](const std::int64_t j) {
            pv(base + j) =
                static_cast<T>(kmath::exp(static_cast<double>(xv(base + j)) - max) / sum_exp);
          });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          acc += kmath::log(sum_exp) - (static_cast<double>(xv(base + lv(r))) - max);
        });
      },
      loss);
  return loss;
}

template <class T>
void softmax_cross_entropy_backward(const Tensor<T>& probs, const std::vector<std::int32_t>& labels,
                                    T scale, Tensor<T>& dlogits) {
  const char* op = "softmax_cross_entropy_backward";
  check_logits(probs, op);
  check_same_shape(probs, dlogits, op, "dlogits");
  const std::int64_t rows = probs.extent(0), classes = probs.extent(1);
  auto lv = upload_labels(labels, rows, classes, op);
  auto pv = probs.view();
  auto dv = dlogits.view();
  Kokkos::parallel_for(
      "distop::softmax_cross_entropy_backward", Kokkos::RangePolicy<ExecSpace>(0, rows * classes),
      KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t r = i / classes;
        const T onehot = (i - r * classes) == lv(r) ? T(1) : T(0);
        dv(i) = scale * (pv(i) - onehot);
      });
}

template <class T>
std::int64_t count_correct(const Tensor<T>& logits, const std::vector<std::int32_t>& labels) {
  const char* op = "count_correct";
  check_logits(logits, op);
  const std::int64_t rows = logits.extent(0), classes = logits.extent(1);
  auto lv = upload_labels(labels, rows, classes, op);
  auto xv = logits.view();
  std::int64_t correct = 0;
  Kokkos::parallel_reduce(
      "distop::count_correct", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(std::int64_t r, std::int64_t & acc) {
        const std::int64_t base = r * classes;
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < classes; ++j)
          if (xv(base + j) > xv(base + best)) best = j;
        if (best == lv(r)) ++acc;
      },
      correct);
  return correct;
}

template <class T>
void causal_mask(const Tensor<T>& x, std::int64_t matrix_rows, std::int64_t row_offset,
                 Tensor<T>& y) {
  const char* op = "causal_mask";
  check_logits(x, op);
  DISTOP_CHECK(y.shape() == x.shape(), op, "y has shape ", y.shape().str(), ", expected ",
               x.shape().str());
  DISTOP_CHECK(matrix_rows > 0 && x.extent(0) % matrix_rows == 0 && row_offset >= 0, op,
               "expected whole matrices of ", matrix_rows, " rows at row offset ", row_offset,
               ", found ", x.shape().str());
  const std::int64_t n = x.extent(1);
  auto xv = x.view();
  auto yv = y.view();
  const T hidden = -std::numeric_limits<T>::infinity();
  Kokkos::parallel_for(
      "distop::causal_mask", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t e) {
        const std::int64_t i = (e / n) % matrix_rows + row_offset;
        yv(e) = e % n > i ? hidden : xv(e);
      });
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template void causal_mask(const Tensor<T>&, std::int64_t, std::int64_t, Tensor<T>&);             \
  template void softmax(const Tensor<T>&, Tensor<T>&);                                             \
  template void log_softmax(const Tensor<T>&, Tensor<T>&);                                         \
  template void log_softmax_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);           \
  template void softmax_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);               \
  template double softmax_cross_entropy(const Tensor<T>&, const std::vector<std::int32_t>&,        \
                                        Tensor<T>*);                                               \
  template void softmax_cross_entropy_backward(const Tensor<T>&, const std::vector<std::int32_t>&, \
                                               T, Tensor<T>&);                                     \
  template std::int64_t count_correct(const Tensor<T>&, const std::vector<std::int32_t>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
