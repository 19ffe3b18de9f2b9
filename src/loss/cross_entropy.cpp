#include "distop/loss/cross_entropy.hpp"

#include <string>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/comm/agree.hpp"
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
  const char* op = "cross_entropy";
  const TensorSpace& s = logits.space();
  check_logits_space(s, op);
  const std::string problem = label_problem(s.local_shape(), labels);
  comm::agree_ok(s.partition().parent(), op, problem.empty(), problem);

  const bool active = s.partition().active();
  const double batch = static_cast<double>(s.global_shape()[0]);
  return make_function<T>(tape, op, {logits}, [&](bool recording) {
    Tensor<T> probs;  // softmax(logits), for the backward
    double sum = 0;
    if (active) {
      if (recording)
        probs = Tensor<T>::uninitialized(s.local_shape(), "distop::cross_entropy::probs");
      sum = kernels::softmax_cross_entropy(logits.value().local(), labels,
                                           recording ? &probs : nullptr);
    }
    // The saved probabilities' storage becomes the gradient: a backward runs once.
    auto backward = [probs, labels, active, batch](const DistTensor<T>& dy,
                                                   Gradients<T>& grads) mutable {
      const TensorSpace& space = grads.input(0).space();
      if (!active) {
        grads.add(0, DistTensor<T>::uninitialized(space));  // empty
        return;
      }
      auto dx = DistTensor<T>::from_local(space, std::move(probs));
      const T scale = static_cast<T>(detail::scalar_grad(dy) / batch);
      kernels::softmax_cross_entropy_backward(dx.local(), labels, scale, dx.local());
      grads.add(0, std::move(dx));
    };
    return Computed{detail::scalar<T>(s.partition(), batch > 0 ? sum / batch : 0.0),
                    std::move(backward)};
  });
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
