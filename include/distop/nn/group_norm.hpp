#pragma once
// Group normalisation (torch.nn.GroupNorm) and instance normalisation (torch.nn.InstanceNorm1d/2d/
// 3d, its special case of one channel per group), also over an input split along its batch and
// spatial axes.

#include <cstdint>
#include <string>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// PyTorch's defaults.
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // a learnable weight (initially 1) and bias (initially 0), one per channel
};

// Group normalisation of x [N, C, s_1..s_d] (d = 1 to 3), torch's nn.GroupNorm(G, C): the C
// channels fall into G groups of C / G consecutive channels, and for each sample and group the mean
// and the biased variance are taken over the group's C / G channels and the whole spatial domain
// (M = C / G s_1..s_d entries):
//   xhat = (x - mean) / sqrt(var + eps),  y = weight[c] xhat + bias[c].
// No running statistics: training and evaluation compute alike. Gradients (recorded when x, the
// weight or the bias requires one), with g = dy weight[c] and sums over a (sample, group):
//   dx = (g - sum g / M - xhat sum (g xhat) / M) / sqrt(var + eps),
//   dweight[c] = sum over samples and space of dy xhat,  dbias[c] = sum of dy.
// C not a multiple of G is an Error at construction.
//
// Parameters "weight" and "bias" [C] (torch's names; per_replica) are replicated over `partition`
// (by default this process alone), one copy per rank. Under the sum convention each copy is its
// own component: a copy's gradient is the sum over its own rank's box (zero where it holds none),
// as for BatchNorm's and Linear's replicated parameters; the copies add up to the one-rank
// gradient, and making them agree is the caller's (data parallelism's) explicit step.
//
// Channels are whole on every rank: an input whose channel axis is split is an Error. The batch
// axis may be split any way. When x's spatial axes are whole on every rank the layer is local:
// each rank normalises the samples of its own box, with no messages, and every rank holding a box
// must be in the partition. When x is split along spatial axes (balanced or not, over any grid
// axes) it must live on the layer's partition (the same ranks in the same grid); a sample then lies
// across the ranks that share this rank's coordinates off the grid axes splitting the spatial axes,
// and
//   forward all-gathers over them each part's (mean, sum of squared deviations) per (sample,
//   group), [N_local G, 2] from every part, one collective, combined stably (Chan: no sums of
//   squares cancel) in the same order on every rank;
//   backward all-sum-reduces the two per-(sample, group) sums of g and g xhat ([N_local G, 2]),
//   when x requires a gradient; the parameter gradients need no message.
// Forward and backward are then collective over the partition's ranks (ranks outside it hold empty
// tensors); backward runs on every rank of the partition even where y received no gradient. A grid
// axis that replicates x takes no part: each copy is normalised on its own.
//
//   nn::GroupNorm<float> norm(8, 64);                                   // local
//   nn::GroupNorm<float> split(8, 64, Partition::world(Shape{1, 1, 2, 2}));  // x [N, 64, H, W]
template <class T>
class GroupNorm : public Module<T> {
 public:
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels, GroupNormOptions options = {});
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels, Partition partition,
            GroupNormOptions options = {});

  std::int64_t num_groups() const noexcept { return groups_; }
  std::int64_t num_channels() const noexcept { return channels_; }
  const GroupNormOptions& options() const noexcept { return options_; }
  const Partition& partition() const noexcept { return partition_; }

  // [C] each, replicated over the partition; an Error when the layer is not affine.
  Var<T>& weight();
  Var<T>& bias();

  // y in x's space. Collective over the partition where x's spatial axes are split (see above).
  Var<T> forward(Tape& tape, const Var<T>& x);

 protected:
  // `name` names the layer in its Errors.
  GroupNorm(std::string name, std::int64_t num_groups, std::int64_t num_channels,
            Partition partition, GroupNormOptions options);

 private:
  std::string name_;
  std::int64_t groups_;
  std::int64_t channels_;
  GroupNormOptions options_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
};

// torch.nn.InstanceNorm1d/2d/3d's defaults: no affine map; no running statistics (torch's
// track_running_stats = false, the only form distop has: the statistics are each instance's, in
// training and evaluation alike).
struct InstanceNormOptions {
  double eps = 1e-5;
  bool affine = false;  // a learnable weight (initially 1) and bias (initially 0) [C]
};

// Instance normalisation of x [N, C, s_1..s_d] (d = 1 to 3, torch's InstanceNorm1d/2d/3d on a
// batched input): the mean and biased variance of each sample's channel over the spatial domain,
// exactly GroupNorm with one channel per group (G = C), with GroupNorm's partitions, messages and
// parameters ("weight" and "bias" [C] where affine).
template <class T>
class InstanceNorm : public GroupNorm<T> {
 public:
  explicit InstanceNorm(std::int64_t num_features, InstanceNormOptions options = {});
  InstanceNorm(std::int64_t num_features, Partition partition, InstanceNormOptions options = {});
};

extern template class GroupNorm<float>;
extern template class GroupNorm<double>;
extern template class InstanceNorm<float>;
extern template class InstanceNorm<double>;

}  // namespace distop::nn
