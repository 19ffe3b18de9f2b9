#pragma once
// The convolutional network of data-parallel training: local layers, replicated on every rank,
// each rank computing on its share of the batch.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>

#include "../common/conv_features.hpp"

namespace distop::examples {

// conv1 C->32 3x3 padding 1, ReLU, 2x2 max pool; conv2 32->64 3x3 padding 1, ReLU, 2x2 max pool;
// conv3 64->128 3x3 padding 1, ReLU, 2x2 max pool; flatten in (channel, row, column) order;
// fc1 -> 1024, ReLU, dropout 0.5; fc2 1024 -> 10. For 1 x 28 x 28 images (Fashion-MNIST) the
// maps shrink 28 -> 14 -> 7 -> 3 and fc1 takes 128 x 3 x 3 = 1152 features (1.3 M parameters);
// for 3 x 32 x 32 (CIFAR-10) 32 -> 16 -> 8 -> 4 and 128 x 4 x 4 = 2048. The ReLU after each
// convolution runs after its max pool: ReLU is monotone, so relu(max) = max(relu) value for value,
// and the gradients agree entry for entry (see examples/lenet5/model.hpp), on a quarter of the
// entries.
//
// The convolutions are examples/common's ConvFeatures, registered here under its children's own
// names. Every layer is a local one (nn::Conv, nn::Pool, nn::Linear, nn::Dropout). The input's
// batch axis may be split over the ranks of `comm` (a balanced split, each rank its own block of
// rows), the parameters then replicated over those ranks, each copy's gradient from its own rows
// (per_replica). The example runs it purely data parallel: one replica per rank, `comm` that
// replica's single rank, and the gradient reducer averaging over the replicas. The masks of
// dropout are keyed by the global index within the replica's batch.
//
// Children "conv1", "conv2", "conv3", "fc1", "fc2" and "dropout" (which has no state), so the
// state_dict names are a PyTorch nn.Module's with those attributes: "conv1.weight"
// [32, C, 3, 3], "conv1.bias", ..., "fc2.weight" [10, 1024], "fc2.bias".
class ConvNet : public nn::Module<float> {
 public:
  static constexpr std::int64_t kClasses = 10;

  // Images of `channels` x `rows` x `cols` (each at least 8, so that three pools leave a map), on
  // the ranks of `comm`. Collective over `comm` (it makes the partitions).
  ConvNet(std::int64_t channels, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
          MPI_Comm comm = MPI_COMM_WORLD);

  // [batch, channels, rows, cols], the batch split over the ranks of `comm` (balanced: the first
  // batch % R ranks one row more). Error unless batch >= R.
  TensorSpace input_space(std::int64_t batch) const;
  // Logits [batch, 10], the batch split as the input's.
  Var<float> forward(Tape& tape, const Var<float>& x);
  // One line per layer.
  std::string describe() const;
  // The model's memory on one rank (train/memory.hpp) for images of `channels` x `rows` x `cols`,
  // from the shapes alone, before anything is built: the input, the convolutions, fc1 with its
  // ReLU and dropout (output and mask), fc2, every rank holding the whole model.
  static train::ModelFootprint footprint(std::int64_t channels, std::int64_t rows,
                                         std::int64_t cols);

  // fc1's input features: 128 x (rows / 8) x (cols / 8).
  std::int64_t features() const noexcept { return fc1_->in_features(); }
  nn::Dropout<float>& dropout() noexcept { return *dropout_; }

 private:
  std::int64_t channels_, rows_, cols_;
  Partition replicas_;     // the ranks of `comm`, a 1-D grid: the parameters' copies
  Partition batch_grid_;   // the same ranks as [R, 1, 1, 1]: the input's batch split
  ConvFeatures features_;  // conv1..conv3, registered as this model's own children
  std::shared_ptr<nn::Conv<float>> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::Linear<float>> fc1_, fc2_;
  std::shared_ptr<nn::Dropout<float>> dropout_;
};

}  // namespace distop::examples
