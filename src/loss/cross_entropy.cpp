#include "distop/loss/cross_entropy.hpp"

#include <string>
#include <utility>

#include "distop/comm/agree.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/softmax.hpp"
#include "scalar.hpp"

namespace distop::loss {

namespace {

void check_logits_space(const TensorSpace& s, const char* op) {
  DISTOP_CHECK(s.rank() == 2 && s.decomposition().parts(1) == 1, op,
               "expected logits of global shape [batch, classes] with the class axis unsplit, "
               "found ",
               s.str());
}

// Empty when the labels fit the local box, else what is wrong with them.
std::string label_problem(const Shape& local, const std::vector<std::int32_t>& labels) {
  if (static_cast<std::int64_t>(labels.size()) != local[0])
    return "expected " + std::to_string(local[0]) + " labels (one per local row), found " +
           std::to_string(labels.size());
  for (std::size_t r = 0; r < labels.size(); ++r)
    if (labels[r] < 0 || labels[r] >= local[1])
      return "label " + std::to_string(labels[r]) + " of local row " + std::to_string(r) +
             " is out of range [0, " + std::to_string(local[1]) + ")";
  return {};
}

}  // namespace

template <class T>
Var<T> cross_entropy(Tape& tape, const Var<T>& logits, const std::vector<std::int32_t>& labels) {
  const trace::Compute span("cross_entropy");
  const char* op = "cross_entropy";
  const TensorSpace& s = logits.space();
  check_logits_space(s, op);
  const std::string problem = label_problem(s.local_shape(), labels);
  comm::agree_ok(s.partition().parent(), op, problem.empty(), problem);

  const bool active = s.partition().active();
  const double batch = static_cast<double>(s.global_shape()[0]);
  Tensor<T> probs;
  double sum = 0;
  if (active) {
    probs = Tensor<T>::uninitialized(s.local_shape(), "distop::cross_entropy::probs");
    sum = kernels::softmax_cross_entropy(logits.value().local(), labels, &probs);
  }
  Var<T> loss(detail::scalar<T>(s.partition(), batch > 0 ? sum / batch : 0.0),
              logits.requires_grad());
  if (!logits.requires_grad()) return loss;

  tape.record(op, [x = logits, loss, probs, labels, active, batch, use = logits.use()]() mutable {
    if (!loss.has_grad()) return;
    auto dx = DistTensor<T>::uninitialized(x.space());
    if (active) {
      const T scale = static_cast<T>(detail::scalar_grad(loss.grad()) / batch);
      kernels::softmax_cross_entropy_backward(probs, labels, scale, dx.local());
    }
    x.accumulate_grad(std::move(dx));
  });
  return loss;
}

template <class T>
std::int64_t count_correct(const DistTensor<T>& logits, const std::vector<std::int32_t>& labels) {
  check_logits_space(logits.space(), "count_correct");
  if (!logits.space().partition().active()) return 0;
  return kernels::count_correct(logits.local(), labels);
}

#define DISTOP_INSTANTIATE(T)                                                            \
  template Var<T> cross_entropy(Tape&, const Var<T>&, const std::vector<std::int32_t>&); \
  template std::int64_t count_correct(const DistTensor<T>&, const std::vector<std::int32_t>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::loss
