#pragma once
// Batch normalisation: the local layer BatchNorm<T> and DistributedBatchNorm<T>, whose statistics
// are taken over an input split across a partition.

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// PyTorch's defaults.
struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;  // a learnable weight (gamma, initially 1) and bias (beta, initially 0)
};

// Batch normalisation over the channel axis of x [N, C] or [N, C, s_1..s_d] (d = 1 to 3): PyTorch's
// BatchNorm1d/2d/3d. With M the number of entries per channel the statistics are taken over
// (N s_1..s_d) and, per channel c,
//   mean = sum x / M,  var = sum (x - mean)^2 / M (biased),  xhat = (x - mean) / sqrt(var + eps),
//   y = weight xhat + bias.
// Training mode normalises with these batch statistics and updates the running statistics,
//   running_mean = (1 - momentum) running_mean + momentum mean,
//   running_var  = (1 - momentum) running_var  + momentum var M / (M - 1)   (unbiased),
// starting from 0 and 1; M = 1 is an Error, as in PyTorch. Evaluation mode normalises with the
// running statistics and updates nothing. Layers start in training mode.
//
// Gradients (recorded when x, the weight or the bias requires one). With dy the output gradient and
// sums over the same M entries:
//   dbias = sum dy,  dweight = sum dy xhat,
//   dx = weight / sqrt(var + eps) (dy - sum dy / M - xhat sum (dy xhat) / M)   (training),
//   dx = weight / sqrt(running_var + eps) dy                                   (evaluation).

// The local layer: every rank normalises its own box of x with the statistics of that box alone
// (as PyTorch's BatchNorm does on each replica of data-parallel training). x's channel axis must be
// unsplit; its other axes may be split any way. The weight, bias and running statistics [C] are
// replicated over `partition` (by default this process alone), one copy per rank; every rank
// holding a box of x must be in it. Under the sum convention each copy is its own component: a
// rank's weight and bias gradients are the sums over its own box (zero where it holds none), and
// making copies agree is the caller's explicit step, as for Linear. forward is local (no messages).
template <class T>
class BatchNorm : public Module<T> {
 public:
  explicit BatchNorm(std::int64_t channels, BatchNormOptions options = {});
  BatchNorm(std::int64_t channels, Partition partition, BatchNormOptions options = {});

  std::int64_t channels() const noexcept { return channels_; }
  const BatchNormOptions& options() const noexcept { return options_; }
  const Partition& partition() const noexcept { return partition_; }

  // [C] each; weight() and bias() are an Error when the layer is not affine.
  Var<T>& weight();
  Var<T>& bias();
  DistTensor<T>& running_mean() noexcept { return running_mean_; }
  DistTensor<T>& running_var() noexcept { return running_var_; }
  // The training-mode forward passes so far (PyTorch's num_batches_tracked).
  std::int64_t num_batches_tracked() const noexcept { return *batches_; }

  // y in x's space. Updates the running statistics in training mode.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::int64_t channels_;
  BatchNormOptions options_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
  DistTensor<T> running_mean_;
  DistTensor<T> running_var_;
  std::shared_ptr<std::int64_t> batches_ = std::make_shared<std::int64_t>(0);
};

// Batch normalisation of an input split over `partition` along any of its axes but the channel
// axis (the batch and/or spatial axes, balanced or not): the statistics are those of the whole
// global input, exactly as BatchNorm<T> computes them for that input on one rank (PyTorch's
// SyncBatchNorm). x must live on `partition` (the same ranks in the same grid), its channel axis
// unsplit and no grid axis replicating it (each entry counted once).
//
// Communication (collective over the partition's ranks; ranks outside it return at once and hold
// empty tensors): training forward all-sum-reduces the per-channel sums [C] of x, then those of
// the squared deviations [C] from the global mean (two passes, so no cancellation); backward
// all-sum-reduces the per-channel [sum dy, sum dy xhat] ([2, C]), which the input gradient needs
// and which are the weight and bias gradients. Evaluation forward is local; its backward reduces
// the same sums when the weight or bias requires a gradient. The backward entry runs on every rank
// of the partition even where y received no gradient (contributing zeros).
//
// The weight, bias and running statistics are replicated over the partition, and every rank
// updates its own copy. Unlike Linear's replicas, these copies are one tied parameter: each rank's
// weight and bias gradient is the all-reduced total, the gradient of the loss (summed over all
// ranks, the sum convention) with respect to the shared value, identical on every rank and equal
// to the one-rank layer's. So plain SGD keeps the copies identical and matches the one-rank layer
// step for step, with no further reduction; averaging these gradients over the partition (as
// data-parallel training does) leaves them unchanged, whereas summing them would count them
// `partition.size()` times. The running statistics come from the all-reduced statistics and stay
// identical too.
template <class T>
class DistributedBatchNorm : public Module<T> {
 public:
  DistributedBatchNorm(std::int64_t channels, Partition partition, BatchNormOptions options = {});

  std::int64_t channels() const noexcept { return channels_; }
  const BatchNormOptions& options() const noexcept { return options_; }
  const Partition& partition() const noexcept { return partition_; }

  Var<T>& weight();
  Var<T>& bias();
  DistTensor<T>& running_mean() noexcept { return running_mean_; }
  DistTensor<T>& running_var() noexcept { return running_var_; }
  std::int64_t num_batches_tracked() const noexcept { return *batches_; }

  // y in x's space. Collective over the partition (see above).
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::int64_t channels_;
  BatchNormOptions options_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
  DistTensor<T> running_mean_;
  DistTensor<T> running_var_;
  std::shared_ptr<std::int64_t> batches_ = std::make_shared<std::int64_t>(0);
};

extern template class BatchNorm<float>;
extern template class BatchNorm<double>;
extern template class DistributedBatchNorm<float>;
extern template class DistributedBatchNorm<double>;

}  // namespace distop::nn
