#pragma once
// What train::fit minimises: a loss of a batch of examples, with the evaluation metric it reports.
// Cross-entropy (with accuracy), mean squared error and the contrastive losses are here; a
// program's own loss is a class deriving from train::Loss.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/data/idx.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/loss/contrastive.hpp"
#include "distop/train/model.hpp"

namespace distop::train {

// The examples of one step (or one evaluation batch) as a loss sees them: this replica's share of
// the batch.
struct Batch {
  const data::Dataset& data;
  // Indices into `data`, in batch order: row b of the model's input is example examples[b].
  const std::vector<std::int64_t>& examples;
  std::int64_t epoch = 0;  // counted from 0 (in evaluation: the epoch just trained)
  bool training = true;    // false in evaluation, where no backward pass follows
};

// One rank's share of an evaluation metric: the metric is the sum of the numerators over every
// rank divided by the sum of the denominators (accuracy: correctly classified rows over rows).
struct MetricShare {
  double numerator = 0;
  double denominator = 0;
};

// The interface train::fit drives. forward() is called on every rank of the run, for each step
// and each evaluation batch, as collectively as the model's forward pass is.
template <class T>
class Loss {
 public:
  virtual ~Loss() = default;
  Loss() = default;
  Loss(const Loss&) = delete;
  Loss& operator=(const Loss&) = delete;

  // The loss of `batch`, recorded on `tape`: typically the model's output for the batch's inputs
  // measured against its targets. The result is in distop's loss convention (docs/losses.md): a
  // [1] Var replicated over the loss's partition, each rank holding its component, the components
  // summing to the loss of the batch (its mean over the batch's examples, for the losses here).
  virtual Var<T> forward(Tape& tape, const Model<T>& model, const Batch& batch) = 0;
  // The name of the evaluation metric ("accuracy"), or empty when the loss is the only measure.
  virtual std::string metric_name() const { return {}; }
  // This rank's share of the metric over the batch of the last forward().
  virtual MetricShare metric() const { return {}; }
  // The loss's settings that a checkpoint depends on ("temperature"): a resumed run must repeat
  // them (train::fit refuses to resume otherwise).
  virtual io::Metadata settings() const { return {}; }
};

// Loads this rank's box of a batch's images into x, whose axis 0 is the batch (data::load_batch).
template <class T>
void load_images(const Batch& batch, DistTensor<T>& x);

// PyTorch's cross_entropy of the model's logits ([batch, classes], the class axis whole) against
// the examples' labels (loss::cross_entropy), the input being the batch's images in
// model.input_space(); the metric is the accuracy (the first maximal logit is the label).
template <class T>
class CrossEntropyLoss final : public Loss<T> {
 public:
  Var<T> forward(Tape& tape, const Model<T>& model, const Batch& batch) override;
  std::string metric_name() const override { return "accuracy"; }
  MetricShare metric() const override { return share_; }

 private:
  MetricShare share_;
  std::vector<std::int32_t> labels_;
};

// PyTorch's mse_loss of the model's output against a target (loss::mse), the input being the
// batch's images in model.input_space(). `target(batch, y)` overwrites this rank's box of y, a
// tensor of the output's space, with the batch's targets. No metric: the loss is the measure.
template <class T>
class MSELoss final : public Loss<T> {
 public:
  using Target = std::function<void(const Batch& batch, DistTensor<T>& y)>;
  explicit MSELoss(Target target);
  // The target of a classifier trained by squared error: the one-hot rows of the examples'
  // labels, for an output [batch, classes] with the class axis whole.
  static Target one_hot_labels();

  Var<T> forward(Tape& tape, const Model<T>& model, const Batch& batch) override;

 private:
  Target target_;
};

// A contrastive loss of two views of each example (loss/contrastive.hpp): the model's outputs for
// the two views are its rows a and b, over the global batch spread across the ranks of
// `batch_comm` (every rank of the run, when each replica takes a share of the batch). `views(batch,
// xa, xb)` overwrites this rank's boxes of the two inputs (tensors of model.input_space()).
// NT-Xent takes the temperature; CLIP and SigLIP take the model's learnable logit scale (and, for
// SigLIP, bias), passed here. No metric: the loss is the measure.
template <class T>
class ContrastiveLoss final : public Loss<T> {
 public:
  enum class Kind { ntxent, clip, siglip };
  using Views = std::function<void(const Batch& batch, DistTensor<T>& xa, DistTensor<T>& xb)>;
  struct Options {
    Kind kind = Kind::ntxent;
    double temperature = 0.5;                // NT-Xent's
    loss::ContrastiveOptions contrastive{};  // the strategy and its root
    Var<T> logit_scale{};                    // CLIP and SigLIP
    Var<T> logit_bias{};                     // SigLIP
  };
  // Checks the options (a positive temperature; the scalars the kind needs): distop::Error.
  ContrastiveLoss(Views views, MPI_Comm batch_comm, Options options);

  Var<T> forward(Tape& tape, const Model<T>& model, const Batch& batch) override;
  // The kind, the temperature (NT-Xent) and the strategy.
  io::Metadata settings() const override;

 private:
  Views views_;
  MPI_Comm comm_;
  Options options_;
};

extern template class CrossEntropyLoss<float>;
extern template class CrossEntropyLoss<double>;
extern template class MSELoss<float>;
extern template class MSELoss<double>;
extern template class ContrastiveLoss<float>;
extern template class ContrastiveLoss<double>;

}  // namespace distop::train
