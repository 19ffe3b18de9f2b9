#include "distop/kernels/softmax.hpp"

#include <Kokkos_Core.hpp>

#include "kokkos_math.hpp"

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

// The maximum of row r (classes >= 1) and the sum of exp(x - max) over it, in double.
template <class V>
KOKKOS_INLINE_FUNCTION void row_stats(const V& x, std::int64_t r, std::int64_t classes, double& max,
                                      double& sum_exp) {
  const std::int64_t base = r * classes;
  max = static_cast<double>(x(base));
  for (std::int64_t j = 1; j < classes; ++j) {
    const double v = static_cast<double>(x(base + j));
    if (v > max) max = v;
  }
  sum_exp = 0;
  for (std::int64_t j = 0; j < classes; ++j)
    sum_exp += kmath::exp(static_cast<double>(x(base + j)) - max);
}

}  // namespace

template <class T>
void softmax(const Tensor<T>& logits, Tensor<T>& probs) {
  check_logits(logits, "softmax");
  check_same_shape(logits, probs, "softmax", "probs");
  const std::int64_t classes = logits.extent(1);
  auto xv = logits.view();
  auto pv = probs.view();
  Kokkos::parallel_for(
      "distop::softmax", Kokkos::RangePolicy<ExecSpace>(0, rows_with_classes(logits)),
      KOKKOS_LAMBDA(std::int64_t r) {
        double max, sum_exp;
        row_stats(xv, r, classes, max, sum_exp);
        for (std::int64_t j = r * classes; j < (r + 1) * classes; ++j)
          pv(j) = static_cast<T>(kmath::exp(static_cast<double>(xv(j)) - max) / sum_exp);
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
      "distop::log_softmax", Kokkos::RangePolicy<ExecSpace>(0, rows_with_classes(logits)),
      KOKKOS_LAMBDA(std::int64_t r) {
        double max, sum_exp;
        row_stats(xv, r, classes, max, sum_exp);
        // (x - max) - log(sum), not x - (max + log(sum)): max + log(sum) rounds away the digits
        // of log(sum) below max's precision (all of log 2 once |max| reaches 1e17).
        const double log_sum = kmath::log(sum_exp);
        for (std::int64_t j = r * classes; j < (r + 1) * classes; ++j)
          ov(j) = static_cast<T>((static_cast<double>(xv(j)) - max) - log_sum);
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
      "distop::log_softmax_backward", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(std::int64_t r) {
        double sum = 0;
        for (std::int64_t j = r * classes; j < (r + 1) * classes; ++j)
          sum += static_cast<double>(gv(j));
        for (std::int64_t j = r * classes; j < (r + 1) * classes; ++j) {
          const T v = static_cast<T>(static_cast<double>(gv(j)) -
                                     kmath::exp(static_cast<double>(ov(j))) * sum);
          dv(j) = beta == T(0) ? v : v + beta * dv(j);
        }
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
  Kokkos::parallel_reduce(
      "distop::softmax_cross_entropy", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(std::int64_t r, double& acc) {
        double max, sum_exp;
        row_stats(xv, r, classes, max, sum_exp);
        const std::int64_t base = r * classes;
        acc += kmath::log(sum_exp) - (static_cast<double>(xv(base + lv(r))) - max);
        if (write_probs)
          for (std::int64_t j = base; j < base + classes; ++j)
            pv(j) = static_cast<T>(kmath::exp(static_cast<double>(xv(j)) - max) / sum_exp);
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

#define DISTOP_INSTANTIATE(T)                                                                      \
  template void softmax(const Tensor<T>&, Tensor<T>&);                                             \
  template void log_softmax(const Tensor<T>&, Tensor<T>&);                                         \
  template void log_softmax_backward(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&);           \
  template double softmax_cross_entropy(const Tensor<T>&, const std::vector<std::int32_t>&,        \
                                        Tensor<T>*);                                               \
  template void softmax_cross_entropy_backward(const Tensor<T>&, const std::vector<std::int32_t>&, \
                                               T, Tensor<T>&);                                     \
  template std::int64_t count_correct(const Tensor<T>&, const std::vector<std::int32_t>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::kernels
