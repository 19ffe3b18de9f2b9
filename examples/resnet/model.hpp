#pragma once
// ResNet-18 (torchvision's resnet18) with its convolutions, batch norms and pooling spatially
// partitioned over a grid of ranks (distdl-examples' ResNet), for 32 x 32 images.

#include <cstdint>
#include <distop/distop.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace distop::examples {

// torchvision.models.resnet18(num_classes=10): conv1 C->64 7x7 stride 2 padding 3, bn1, ReLU,
// 3x3 max pool stride 2 padding 1; layer1..layer4 of two basic blocks each (64, 128, 256, 512
// channels; the first block of layer2..layer4 halves the map with stride 2 and adds a 1x1
// stride-2 convolution and a batch norm, its `downsample`, on the residual path); adaptive
// average pool to 1 x 1; fc 512->10. A basic block is conv1 3x3 (stride s), bn1, ReLU, conv2 3x3,
// bn2, the residual added, ReLU. Convolutions without bias; convolution weights from kaiming
// normal (fan_out, ReLU gain: std = sqrt(2 / (out_channels k k))), batch norms weight 1 and bias 0,
// fc as nn.Linear, all keyed by global index so every partitioning starts from the same weights.
//
// Spatial partitioning: at R ranks every convolution, batch norm (statistics over the whole
// batch and map: PyTorch's SyncBatchNorm, which on one rank is BatchNorm2d), pooling and residual
// add runs on a [1, 1, R / a, a] grid of the map (a = the squarest split, the rows taking the
// larger share: 2 x 1 at 2 ranks, 2 x 2 at 4, 4 x 2 at 8), the neighbours' rows and columns
// arriving by halo exchanges. A stage whose map has fewer rows or columns than the grid runs on
// the leading ranks of a smaller grid (min(rows, grid rows) x min(cols, grid cols)), its input
// moved there by a Repartition: on 32 x 32 images the maps are 16 (conv1), 8 (layer1), 4, 2 and 1
// (layer4), so at 4 ranks layer4 runs on one rank. The average pool reads whole maps: the last
// map moves to its ranks split by channel ([1, P, 1, 1]), each rank averages its channels, and fc
// runs on that [1, P] weight grid, the logits ending on its first rank.
//
// Children "conv1", "bn1", "layer1".."layer4" (each with children "0" and "1", the blocks, whose
// children are "conv1", "bn1", "conv2", "bn2" and, where present, "downsample" with "0" the
// convolution and "1" the batch norm) and "fc": the state_dict names and shapes are torchvision's,
// running statistics and num_batches_tracked included.
class ResNet18 : public nn::Module<float> {
 public:
  static constexpr std::int64_t kSize = 32, kClasses = 10;
  // Images of `channels` x 32 x 32 over the ranks of `comm` (one replica's, in data-parallel
  // training); collective over it.
  ResNet18(std::int64_t channels, std::uint64_t seed, MPI_Comm comm = MPI_COMM_WORLD);

  // [batch, channels, 32, 32] on conv1's grid.
  TensorSpace input_space(std::int64_t batch) const;
  Var<float> forward(Tape& tape, const Var<float>& x);
  // One line per stage: its maps and its grid.
  std::string describe() const;
  // The model's memory on one of `ranks` ranks (train/memory.hpp), from the shapes alone: every
  // layer's share 1 / (the ranks its grid has) of its maps, the weights whole on each.
  static train::ModelFootprint footprint(std::int64_t channels, int ranks);

  class Stage;

 private:
  std::vector<std::shared_ptr<Stage>> register_stages(MPI_Comm comm, std::uint64_t seed);
  // layer4's ranks as [1, P, 1, 1]. Error unless P divides 512.
  static Partition pool_grid(const Partition& last);

  std::int64_t channels_;
  Partition stem_grid_;
  std::shared_ptr<nn::DistributedConv<float>> conv1_;
  std::shared_ptr<nn::DistributedBatchNorm<float>> bn1_;
  nn::DistributedPool<float> max_pool_;
  std::vector<std::shared_ptr<Stage>> stages_;
  Partition by_channel_;  // layer4's ranks as [1, P, 1, 1]: the average pool's input
  std::shared_ptr<nn::DistributedLinear<float>> fc_;
  std::map<std::int64_t, std::shared_ptr<const Repartition<float>>> to_pool_;
};

// The grid of a map of `rows` x `cols` at `ranks` ranks: [1, 1, r, c] with r x c the squarest
// split of the ranks (rows the larger share), each cut to the map's extent; on the leading r c
// ranks of `comm`.
Partition resnet_map_grid(MPI_Comm comm, std::int64_t rows, std::int64_t cols);

// A copy of `d` with every image padded by `pad` zeros on each side (torchvision's
// transforms.Pad(pad)): Fashion-MNIST's 28 x 28 to 32 x 32.
data::Dataset pad_images(const data::Dataset& d, std::int64_t pad);

}  // namespace distop::examples
