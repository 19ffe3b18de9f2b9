#include "distop/train/loss.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <utility>

#include "distop/core/error.hpp"
#include "distop/core/trace.hpp"
#include "distop/data/batch.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/loss/mse.hpp"

namespace distop::train {

template <class T>
void load_images(const Batch& batch, DistTensor<T>& x) {
  // A training step's load phase (within its forward phase).
  std::optional<trace::Span> phase;
  if (batch.training) phase.emplace("phase", "load");
  data::load_batch(batch.data, batch.examples, x);
}

namespace {

// The labels of the rows of this rank's box of `space` ([batch, classes]): the examples' classes.
std::vector<std::int32_t>& box_labels(const TensorSpace& space, const Batch& batch,
                                      std::vector<std::int32_t>& labels) {
  labels.clear();
  const std::int64_t first = space.local_offset()[0], rows = space.local_shape()[0];
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t example = batch.examples[static_cast<std::size_t>(first + i)];
    DISTOP_CHECK(example >= 0 && example < batch.data.size, "train::Loss", "example ", example,
                 " is outside the data set of ", batch.data.size, " examples");
    labels.push_back(batch.data.labels[static_cast<std::size_t>(example)]);
  }
  return labels;
}

// The model's output for the batch's images.
template <class T>
Var<T> output_for_images(Tape& tape, const Model<T>& model, const Batch& batch) {
  auto x = DistTensor<T>::uninitialized(
      model.input_space(static_cast<std::int64_t>(batch.examples.size())));
  load_images(batch, x);
  return model.forward(tape, Var<T>(std::move(x)));
}

// The shortest text that reads back as the same double.
std::string exact(double v) {
  char buf[32];
  *std::to_chars(buf, buf + sizeof buf - 1, v).ptr = '\0';
  return buf;
}

}  // namespace

template <class T>
Var<T> CrossEntropyLoss<T>::forward(Tape& tape, const Model<T>& model, const Batch& batch) {
  const Var<T> logits = output_for_images(tape, model, batch);
  DISTOP_CHECK(logits.space().rank() == 2, "CrossEntropyLoss",
               "expected the model's output to be logits [batch, classes], found ",
               logits.space().str());
  box_labels(logits.space(), batch, labels_);
  Var<T> loss = loss::cross_entropy(tape, logits, labels_);
  share_.numerator = static_cast<double>(loss::count_correct(logits.value(), labels_));
  share_.denominator = static_cast<double>(labels_.size());
  return loss;
}

template <class T>
MSELoss<T>::MSELoss(Target target) : target_(std::move(target)) {
  DISTOP_CHECK(static_cast<bool>(target_), "MSELoss", "no target function given");
}

template <class T>
typename MSELoss<T>::Target MSELoss<T>::one_hot_labels() {
  return [](const Batch& batch, DistTensor<T>& y) {
    const TensorSpace& s = y.space();
    DISTOP_CHECK(s.rank() == 2 && s.decomposition().parts(1) == 1, "MSELoss::one_hot_labels",
                 "expected an output [batch, classes] with the class axis whole, found ", s.str());
    std::vector<std::int32_t> labels;
    box_labels(s, batch, labels);
    const std::int64_t classes = s.global_shape()[1];
    auto box = HostTensor<T>(s.local_shape());  // zeros
    for (std::size_t r = 0; r < labels.size(); ++r) {
      DISTOP_CHECK(labels[r] >= 0 && labels[r] < classes, "MSELoss::one_hot_labels", "label ",
                   labels[r], " is outside [0, ", classes, ")");
      box.data()[static_cast<std::int64_t>(r) * classes + labels[r]] = T(1);
    }
    deep_copy(y.local(), box);
  };
}

template <class T>
Var<T> MSELoss<T>::forward(Tape& tape, const Model<T>& model, const Batch& batch) {
  const Var<T> y = output_for_images(tape, model, batch);
  auto target = DistTensor<T>::uninitialized(y.space());
  target_(batch, target);
  return loss::mse(tape, y, target);
}

template <class T>
ContrastiveLoss<T>::ContrastiveLoss(Views views, MPI_Comm batch_comm, Options options)
    : views_(std::move(views)), comm_(batch_comm), options_(std::move(options)) {
  constexpr const char* op = "ContrastiveLoss";
  DISTOP_CHECK(static_cast<bool>(views_), op, "no views function given");
  DISTOP_CHECK(std::isfinite(options_.temperature) && options_.temperature > 0, op,
               "the temperature must be positive, found ", options_.temperature);
  DISTOP_CHECK(options_.kind == Kind::ntxent || options_.logit_scale.defined(), op,
               "CLIP and SigLIP need the model's logit scale");
  DISTOP_CHECK(options_.kind != Kind::siglip || options_.logit_bias.defined(), op,
               "SigLIP needs the model's logit bias");
}

template <class T>
Var<T> ContrastiveLoss<T>::forward(Tape& tape, const Model<T>& model, const Batch& batch) {
  const TensorSpace space = model.input_space(static_cast<std::int64_t>(batch.examples.size()));
  auto xa = DistTensor<T>::uninitialized(space);
  auto xb = DistTensor<T>::uninitialized(space);
  views_(batch, xa, xb);
  const Var<T> za = model.forward(tape, Var<T>(std::move(xa)));
  const Var<T> zb = model.forward(tape, Var<T>(std::move(xb)));
  const auto& o = options_;
  switch (o.kind) {
    case Kind::clip:
      return loss::clip_loss(tape, za, zb, o.logit_scale, comm_, o.contrastive);
    case Kind::siglip:
      return loss::siglip_loss(tape, za, zb, o.logit_scale, o.logit_bias, comm_, o.contrastive);
    case Kind::ntxent:
      break;
  }
  return loss::ntxent(tape, za, zb, static_cast<T>(o.temperature), comm_, o.contrastive);
}

template <class T>
io::Metadata ContrastiveLoss<T>::settings() const {
  const char* kind = options_.kind == Kind::clip     ? "clip"
                     : options_.kind == Kind::siglip ? "siglip"
                                                     : "ntxent";
  // Not the strategy: every strategy computes the same loss.
  io::Metadata m{{"loss", kind}};
  if (options_.kind == Kind::ntxent) m["temperature"] = exact(options_.temperature);
  return m;
}

#define DISTOP_INSTANTIATE(T)                              \
  template void load_images(const Batch&, DistTensor<T>&); \
  template class CrossEntropyLoss<T>;                      \
  template class MSELoss<T>;                               \
  template class ContrastiveLoss<T>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::train
