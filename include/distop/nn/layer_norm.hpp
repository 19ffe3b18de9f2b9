#pragma once
// Layer normalisation over the last axis (torch.nn.LayerNorm), also with that axis split across
// ranks.

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/module.hpp"
#include "distop/ops/all_sum_reduce.hpp"

namespace distop::nn {

// PyTorch's defaults, and where the normalised axis is split.
struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // a learnable weight (initially 1) and, with `bias`, a bias (0)
  bool bias = true;
  // The grid axis of the layer's partition that splits the normalised (last) axis, or -1: the axis
  // is whole on every rank.
  int split_axis = -1;
  // The extents of the blocks of the normalised axis along `split_axis` (as many as the grid axis
  // has ranks, each at least 1, adding up to the normalised size); empty: balanced.
  std::vector<std::int64_t> split_extents{};
  // A grid axis over which the rows of one sample are split (sequence parallelism: its tokens),
  // or -1. The copies of the weight and bias along it are then one parameter, tied: forward
  // applies Megatron's f over the axis to them (nn/tensor_parallel.hpp), so that every copy
  // receives the whole gradient, the sum of its ranks' rows' (one all-reduce per parameter in
  // backward), rather than its own rows' part.
  int tie_axis = -1;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis of x [..., D] (torch's
// nn.LayerNorm(D)), the mean and the biased variance taken over each row of D entries. Gradients
// (recorded when x, the weight or the bias requires one), with g = dy weight, xhat the normalised
// x and means over the row:
//   dx = (g - mean(g) - xhat mean(g xhat)) / sqrt(var + eps),
//   dweight = the sum over rows of dy xhat,  dbias = the sum over rows of dy.
//
// Parameters "weight" and "bias" [D] (torch's names; per_replica), on `partition` (by default this
// process alone): split over options.split_axis as the normalised axis is, and replicated over the
// partition's other grid axes, one copy per rank. Under the sum convention each copy is its own
// component: a copy's gradient is the sum over the rows of its own rank's box (zero where it holds
// none), as for Linear's replicated bias.
//
// Without a split axis the layer is local: every rank normalises the rows of its own box, which
// must hold whole rows (x's last axis unsplit; the other axes split any way), and every rank
// holding a box of x must be in the partition. forward is local (no messages).
//
// With a split axis x must live on the partition (the same ranks in the same grid) with its last
// axis split over grid axis options.split_axis into the layer's blocks (its other axes may be split
// over other grid axes). A row then lies across the ranks that share this rank's coordinates off
// the split axis: forward all-gathers each part's (mean, sum of squared deviations) per row over
// them (one collective, combined stably, so no sums of squares cancel), and backward
// all-sum-reduces the two row sums of g and g xhat ([rows, 2]). Construction, forward and backward
// are then collective over the partition's ranks (ranks outside it hold empty tensors); backward
// runs on every rank of the partition even where y received no gradient.
//
//   nn::LayerNorm<float> norm(768);                                     // local
//   nn::LayerNorm<float> split(768, Partition::world(Shape{1, 4}), {.split_axis = 1});
template <class T>
class LayerNorm : public Module<T> {
 public:
  explicit LayerNorm(std::int64_t dim, LayerNormOptions options = {});
  LayerNorm(std::int64_t dim, Partition partition, LayerNormOptions options = {});

  std::int64_t dim() const noexcept { return dim_; }
  const LayerNormOptions& options() const noexcept { return options_; }
  const Partition& partition() const noexcept { return partition_; }
  // [D] on the partition, split as the normalised axis: where the weight and bias live.
  const TensorSpace& parameter_space() const noexcept { return param_space_; }

  // Error when the layer has none (elementwise_affine false; bias false for the bias).
  Var<T>& weight();
  Var<T>& bias();

  // y in x's space.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::int64_t dim_;
  LayerNormOptions options_;
  Partition partition_;
  TensorSpace param_space_;
  MPI_Comm row_comm_ = MPI_COMM_NULL;  // the ranks sharing a row; owned by the partition's cache
  Var<T> weight_;
  Var<T> bias_;
  std::shared_ptr<const AllSumReduce<T>> tie_;  // over options.tie_axis on the parameters' space
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;

}  // namespace distop::nn
