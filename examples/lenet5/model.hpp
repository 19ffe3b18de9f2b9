#pragma once
// LeNet-5 with its convolutions and pooling spatially partitioned and its fully connected layers
// on 2-D weight grids (DistDL's LeNet-5 example).

#include <cstdint>
#include <distop/distop.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace distop::examples {

// conv1 1->6 5x5 padding 2, ReLU, 2x2 max pool; conv2 6->16 5x5, ReLU, 2x2 max pool; flatten to
// 400 in (channel, row, column) order; fc1 400->120, ReLU; fc2 120->84, ReLU; fc3 84->10. The
// ReLU after each convolution runs after its max pool: ReLU is monotone, so relu(max) = max(relu)
// value for value, and the gradients agree entry for entry (a window whose maximum is <= 0 passes
// none back either way; otherwise both route it to the same first maximal tap), on a quarter of
// the entries.
//
// At R ranks the convolutions and pools run on a [1, 1, R / a, a] spatial grid (a = the squarest
// split, the height taking the larger share: 2 x 2 at 4 ranks, 2 x 1 at 2, 4 x 2 at 8). A
// Repartition then moves the [N, 16, 5, 5] feature maps onto fc1's input ranks split by channel,
// where each rank's block of 16 / P_in channels is exactly its block of the 400 flattened features;
// the fully connected layers run on linear_chain_grids(R, 3) and the logits end on rank 0. Runs at
// any R for which fc1's P_in divides 16 and the halos fit (1, 2, 4 and 8 ranks).
//
// Children "conv1", "conv2", "fc1", "fc2", "fc3", so the state_dict names are PyTorch's
// ("conv1.weight" [6, 1, 5, 5], "conv1.bias", ..., "fc3.bias").
class LeNet5 : public nn::Module<float> {
 public:
  static constexpr std::int64_t kRows = 28, kCols = 28, kClasses = 10;
  // Over the ranks of `comm` (one replica's, in data-parallel training); collective over it.
  explicit LeNet5(std::uint64_t seed, MPI_Comm comm = MPI_COMM_WORLD);

  // [batch, 1, 28, 28] on the spatial grid.
  TensorSpace input_space(std::int64_t batch) const;
  // Whether this rank holds the logits (rank 0).
  bool holds_output() const { return fc_.back()->output_partition().active(); }
  Var<float> forward(Tape& tape, const Var<float>& x);
  // One line per layer: its shape and partition.
  std::string describe() const;
  // The model's memory on one of `ranks` ranks (train/memory.hpp), from the shapes alone, before
  // anything is built: the input, conv1 and conv2 with their pools and ReLUs, fc1..fc3 with their
  // ReLUs, each layer's share 1 / ranks (the convolutions' maps split spatially, the fully
  // connected layers' weights over their grids).
  static train::ModelFootprint footprint(int ranks);

 private:
  // fc1-fc3 on linear_chain_grids(R, 3), registered as children.
  std::vector<std::shared_ptr<nn::DistributedLinear<float>>> register_fc(std::uint64_t seed,
                                                                         MPI_Comm comm);

  std::shared_ptr<nn::DistributedConv<float>> conv1_;
  std::shared_ptr<nn::DistributedConv<float>> conv2_;
  nn::DistributedPool<float> pool_;
  std::vector<std::shared_ptr<nn::DistributedLinear<float>>> fc_;
  Partition by_channel_;  // fc1's input ranks as a [1, P_in, 1, 1] grid
  std::map<std::int64_t, std::shared_ptr<const Repartition<float>>> to_fc_;
};

}  // namespace distop::examples
