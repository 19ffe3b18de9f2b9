#pragma once
// A 3-D U-Net whose every layer is spatially partitioned over a grid of ranks: the volumes, the
// feature maps and their gradients are split into blocks, and no rank holds a whole one.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>
#include <utility>

namespace distop::examples {

// How the decoder doubles the resolution: a 2x2x2 transposed convolution of stride 2 that also
// halves the channels (3-D U-Net's up-convolution), or a trilinear (nearest) upsampling of the
// channels as they are.
enum class UNetUp { transpose, trilinear, nearest };

struct UNetOptions {
  std::int64_t base_channels = 8;  // c; the levels have c, 2c and 4c channels
  std::int64_t groups = 4;         // GroupNorm's groups (dividing c)
  UNetUp up = UNetUp::transpose;
  std::uint64_t seed = 1;
};

// Three levels on volumes [N, 1, D, H, W] (S below for each of D, H, W; each divisible by 4):
//   enc0 = block(1 -> c) at S;  enc1 = block(c -> 2c) at S/2 after a 2x2x2 max pool;
//   mid = block(2c -> 4c) at S/4 after another;
//   dec1 = block(2c + u1 -> 2c) on [up(mid), enc1] concatenated along the channels;
//   dec0 = block(c + u0 -> c) on [up(dec1), enc0];  head = 1x1x1 convolution c -> 1 (logits).
// A block is conv 3x3x3 (padding 1), GroupNorm, ReLU, twice. up is a transposed convolution
// 4c -> 2c (u1 = 2c) and 2c -> c (u0 = c) with kernel 2 and stride 2, or an interpolation by 2
// (u1 = 4c, u0 = 2c).
//
// Every layer runs on one grid [1, 1, a, b, c] of the ranks of `comm` (the squarest split of the
// ranks over the three axes: 2 x 1 x 1 at 2 ranks, 2 x 2 x 1 at 4, 2 x 2 x 2 at 8): the
// convolutions exchange halos with the neighbours, GroupNorm's statistics take one all-gather
// over the ranks, the pools and upsamplings their halos, the concatenations are local, and the
// weights are broadcast from and their gradients reduced to the grid's first rank. Each rank's
// activation memory is then about 1 / P of one rank's.
//
// Children "enc0", "enc1", "mid", "dec1", "dec0" (each with "conv1", "norm1", "conv2", "norm2"),
// with transposed convolutions "up1" ("up1.weight" [4c, 2c, 2, 2, 2], "up1.bias") and "up0", and
// "head".
class UNet3d : public nn::Module<float> {
 public:
  // Collective over `comm` (the ranks of one replica).
  // `volume`: the extents D, H, W.
  UNet3d(Shape volume, UNetOptions options, MPI_Comm comm);

  // [batch, 1, D, H, W] on the grid, and the logits [batch, 1, D, H, W] likewise.
  TensorSpace input_space(std::int64_t batch) const;
  Var<float> forward(Tape& tape, const Var<float>& x);
  const Partition& grid() const noexcept { return grid_; }
  std::string describe() const;

  class Block;

 private:
  Shape volume_;
  UNetOptions options_;
  Partition grid_;
  std::shared_ptr<Block> enc0_, enc1_, mid_, dec1_, dec0_;
  std::shared_ptr<nn::DistributedConvTranspose<float>> up1_, up0_;  // UNetUp::transpose
  std::shared_ptr<nn::DistributedInterpolate<float>> upsample_;     // the others
  std::shared_ptr<nn::DistributedConv<float>> head_;
  nn::DistributedPool<float> pool_;
};

// The squarest split of `ranks` over three axes, the first axes the larger shares.
Shape unet_grid(int ranks);

// The synthetic segmentation data: volume n of the stream (n = 0, 1, ...) holds a few random
// spheres and tubes (cylinders between two random points) in Gaussian noise; the label is 1 inside
// a shape, 0 outside, and the voxel 1 + noise inside and noise outside. Every voxel is a function
// of (seed, n, its position) alone, so each rank generates only its own block of a batch and the
// data are the same for every partitioning.
class SyntheticVolumes {
 public:
  SyntheticVolumes(Shape volume, std::uint64_t seed, double noise = 0.5)
      : volume_(std::move(volume)), seed_(seed), noise_(noise) {}
  // Fills this rank's boxes of the images x and the labels y ([batch, 1, D, H, W], the same
  // space) with volumes first, first + 1, ... of the stream.
  void fill(std::int64_t first, DistTensor<float>& x, DistTensor<float>& y) const;

 private:
  Shape volume_;
  std::uint64_t seed_;
  double noise_;
};

}  // namespace distop::examples
