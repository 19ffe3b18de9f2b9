#pragma once
// The convolutional feature extractor of the example CNNs (examples/cnn's convolutional part, and
// SimCLR's encoder in examples/simclr): three 3x3 convolutions with ReLU and 2x2 max pools,
// flattened.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>

namespace distop::examples {

// conv1 C->32 3x3 padding 1, ReLU, 2x2 max pool; conv2 32->64 the same; conv3 64->128 the same;
// flatten in (channel, row, column) order: 128 x (rows / 8) x (cols / 8) features (1152 for
// 28 x 28 images). The ReLU after each convolution runs after its max pool: ReLU is monotone, so
// relu(max) = max(relu) value for value, and the gradients agree entry for entry, on a quarter of
// the entries. Conv k (k = 1, 2, 3) is initialised from seed + k - 1.
//
// Every layer is local (nn::Conv, nn::Pool), its parameters replicated over `replicas` (a 1-D
// partition), each copy's gradient from its own rows of the batch (per_replica). Children
// "conv1", "conv2", "conv3": state_dict names "conv1.weight" [32, C, 3, 3], "conv1.bias", ...,
// "conv3.bias". A model that wants these names at its own top level (examples/cnn) registers
// conv1()..conv3() as its own children instead of registering this module.
class ConvFeatures : public nn::Module<float> {
 public:
  // Images of `channels` x `rows` x `cols`, each extent at least 8 (three pools leave a map).
  // Collective over the ranks of `replicas` (the convolutions' partitions).
  ConvFeatures(std::int64_t channels, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
               const Partition& replicas)
      : channels_(channels),
        rows_(checked_extent(rows, "rows")),
        cols_(checked_extent(cols, "columns")),
        conv1_(register_module("conv1", std::make_shared<nn::Conv<float>>(
                                            2, channels, 32, 3, replicas,
                                            nn::ConvOptions{.padding = 1, .seed = seed}))),
        conv2_(register_module(
            "conv2", std::make_shared<nn::Conv<float>>(
                         2, 32, 64, 3, replicas, nn::ConvOptions{.padding = 1, .seed = seed + 1}))),
        conv3_(register_module("conv3", std::make_shared<nn::Conv<float>>(
                                            2, 64, 128, 3, replicas,
                                            nn::ConvOptions{.padding = 1, .seed = seed + 2}))),
        pool_(nn::PoolKind::max, 2, 2) {}

  // [batch, features()] from images [batch, channels, rows, cols], the batch split as the input's.
  Var<float> forward(Tape& tape, const Var<float>& x) {
    auto h = nn::relu(tape, pool_.forward(tape, conv1_->forward(tape, x)));
    h = nn::relu(tape, pool_.forward(tape, conv2_->forward(tape, h)));
    h = nn::relu(tape, pool_.forward(tape, conv3_->forward(tape, h)));
    return nn::flatten(tape, h);
  }

  // Adds the layers' memory on one rank (train/memory.hpp) to `model`, from the shapes alone (before
  // anything is built): conv1..conv3 with their pools and ReLUs, for images of `channels` x `rows`
  // x `cols`, each rank holding the whole of every layer.
  static void add_footprint(train::ModelFootprint& model, std::int64_t channels, std::int64_t rows,
                            std::int64_t cols) {
    std::int64_t in = channels, r = rows, c = cols;
    for (int k = 1; k <= 3; ++k) {
      const std::int64_t out = 16 << k;  // 32, 64, 128
      const std::string n = std::to_string(k);
      model.conv("conv" + n, in, out, 9, r * c);
      r /= 2;
      c /= 2;
      model.elementwise("pool" + n, static_cast<double>(out * r * c));
      model.elementwise("relu" + n, static_cast<double>(out * r * c));
      in = out;
    }
  }

  // map_channels() x (rows / 8) x (cols / 8), channel-major.
  std::int64_t features() const noexcept { return map_channels() * (rows_ / 8) * (cols_ / 8); }
  // The channels of the last feature map (conv3's outputs).
  static constexpr std::int64_t map_channels() noexcept { return 128; }
  std::int64_t channels() const noexcept { return channels_; }
  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }

  const std::shared_ptr<nn::Conv<float>>& conv1() const noexcept { return conv1_; }
  const std::shared_ptr<nn::Conv<float>>& conv2() const noexcept { return conv2_; }
  const std::shared_ptr<nn::Conv<float>>& conv3() const noexcept { return conv3_; }

  // One line per convolution and one for the flatten, each prefixed with `prefix`.
  std::string describe(const std::string& prefix = "") const {
    std::string s = conv_line(prefix + "conv1", *conv1_, rows_, cols_);
    s += conv_line(prefix + "conv2", *conv2_, rows_ / 2, cols_ / 2);
    s += conv_line(prefix + "conv3", *conv3_, rows_ / 4, cols_ / 4);
    s += "  flatten: 128 x " + std::to_string(rows_ / 8) + " x " + std::to_string(cols_ / 8) +
         " = " + std::to_string(features()) + " features\n";
    return s;
  }

 private:
  static std::int64_t checked_extent(std::int64_t extent, const char* what) {
    DISTOP_CHECK(extent >= 8, "ConvFeatures", "the images' ", what,
                 " must be at least 8 (three 2x2 pools), found ", extent);
    return extent;
  }
  static std::string conv_line(const std::string& name, const nn::Conv<float>& c,
                               std::int64_t rows_in, std::int64_t cols_in) {
    return "  " + name + ": " + std::to_string(c.in_channels()) + " -> " +
           std::to_string(c.out_channels()) + ", 3x3 pad 1 on " + std::to_string(rows_in) + " x " +
           std::to_string(cols_in) + ", ReLU, 2x2 max pool\n";
  }

  std::int64_t channels_, rows_, cols_;
  std::shared_ptr<nn::Conv<float>> conv1_, conv2_, conv3_;
  nn::Pool<float> pool_;
};

}  // namespace distop::examples
