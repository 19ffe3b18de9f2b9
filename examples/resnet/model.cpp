#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "grids.hpp"

namespace distop::examples {

namespace {

constexpr const char* kOp = "ResNet18";
constexpr std::int64_t kWidths[] = {64, 128, 256, 512};

int ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

// The grid's rows and columns for a map of rows x cols at `ranks` ranks (resnet_map_grid).
std::pair<std::int64_t, std::int64_t> map_grid(int ranks, std::int64_t rows, std::int64_t cols) {
  const int a = square_rows(ranks);
  return {std::min<std::int64_t>(ranks / a, rows), std::min<std::int64_t>(a, cols)};
}

// A convolution without bias, its weight from kaiming_normal_(mode="fan_out",
// nonlinearity="relu"), as torchvision's ResNet initialises it.
std::shared_ptr<nn::DistributedConv<float>> make_conv(std::int64_t in, std::int64_t out,
                                                      std::int64_t kernel, std::int64_t stride,
                                                      std::int64_t padding, const Partition& grid,
                                                      std::uint64_t seed) {
  auto conv = std::make_shared<nn::DistributedConv<float>>(
      2, in, out, kernel, grid,
      nn::ConvOptions{.stride = stride, .padding = padding, .bias = false, .seed = seed});
  nn::normal_init(conv->weight().value(), nn::parameter_seed(seed, "weight"), 0.0,
                  std::sqrt(2.0 / static_cast<double>(out * kernel * kernel)));
  return conv;
}

std::shared_ptr<nn::DistributedBatchNorm<float>> make_bn(std::int64_t channels,
                                                         const nn::DistributedConv<float>& conv) {
  return std::make_shared<nn::DistributedBatchNorm<float>>(channels, conv.output_partition());
}

// torchvision's `downsample`: a 1x1 convolution with the block's stride and a batch norm,
// children "0" and "1" as in an nn.Sequential.
class Downsample : public nn::Module<float> {
 public:
  Downsample(std::int64_t in, std::int64_t out, std::int64_t stride, const Partition& grid,
             std::uint64_t seed)
      : conv_(register_module("0", make_conv(in, out, 1, stride, 0, grid, seed))),
        bn_(register_module("1", make_bn(out, *conv_))) {}
  Var<float> forward(Tape& tape, const Var<float>& x) {
    return bn_->forward(tape, conv_->forward(tape, x));
  }

 private:
  std::shared_ptr<nn::DistributedConv<float>> conv_;
  std::shared_ptr<nn::DistributedBatchNorm<float>> bn_;
};

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + identity), identity = x or
// downsample(x) where the stride or the channels change.
class BasicBlock : public nn::Module<float> {
 public:
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride, const Partition& grid,
             std::uint64_t seed)
      : conv1_(register_module("conv1", make_conv(in, out, 3, stride, 1, grid, seed))),
        bn1_(register_module("bn1", make_bn(out, *conv1_))),
        conv2_(register_module("conv2", make_conv(out, out, 3, 1, 1, grid, seed + 1))),
        bn2_(register_module("bn2", make_bn(out, *conv2_))) {
    if (stride != 1 || in != out)
      downsample_ = register_module("downsample",
                                    std::make_shared<Downsample>(in, out, stride, grid, seed + 2));
  }

  TensorSpace input_space(std::int64_t batch, std::int64_t size) const {
    return conv1_->input_space(batch, Shape{size, size});
  }
  Var<float> forward(Tape& tape, const Var<float>& x) {
    auto h = nn::relu(tape, bn1_->forward(tape, conv1_->forward(tape, x)));
    h = bn2_->forward(tape, conv2_->forward(tape, h));
    return nn::relu(tape, nn::add(tape, h, downsample_ ? downsample_->forward(tape, x) : x));
  }

 private:
  std::shared_ptr<nn::DistributedConv<float>> conv1_;
  std::shared_ptr<nn::DistributedBatchNorm<float>> bn1_;
  std::shared_ptr<nn::DistributedConv<float>> conv2_;
  std::shared_ptr<nn::DistributedBatchNorm<float>> bn2_;
  std::shared_ptr<Downsample> downsample_;
};

}  // namespace

// layerK: two basic blocks on the grid of the stage's output map, its input moved onto that grid
// first where the previous stage ran on another.
class ResNet18::Stage : public nn::Module<float> {
 public:
  Stage(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t in_size, MPI_Comm comm,
        std::uint64_t seed)
      : in_size_(in_size),
        out_size_(in_size / stride),
        grid_(resnet_map_grid(comm, out_size_, out_size_)),
        first_(register_module("0", std::make_shared<BasicBlock>(in, out, stride, grid_, seed))),
        second_(register_module("1", std::make_shared<BasicBlock>(out, out, 1, grid_, seed + 3))) {}

  const Partition& grid() const noexcept { return grid_; }
  std::int64_t out_size() const noexcept { return out_size_; }

  Var<float> forward(Tape& tape, const Var<float>& x) {
    const std::int64_t batch = x.space().global_shape()[0];
    const auto in_space = first_->input_space(batch, in_size_);
    auto h = x;
    if (x.space() != in_space) {
      auto& move = moves_[batch];
      if (!move) move = std::make_shared<const Repartition<float>>(x.space(), in_space);
      h = apply<float>(tape, move, x);
    }
    return second_->forward(tape, first_->forward(tape, h));
  }

 private:
  std::int64_t in_size_, out_size_;
  Partition grid_;
  std::shared_ptr<BasicBlock> first_, second_;
  std::map<std::int64_t, std::shared_ptr<const Repartition<float>>> moves_;
};

Partition resnet_map_grid(MPI_Comm comm, std::int64_t rows, std::int64_t cols) {
  const auto [r, c] = map_grid(ranks_of(comm), rows, cols);
  std::vector<int> ranks(static_cast<std::size_t>(r * c));
  for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
  return Partition(comm, Shape{1, 1, r, c}, ranks);
}

ResNet18::ResNet18(std::int64_t channels, std::uint64_t seed, MPI_Comm comm)
    : channels_(channels),
      stem_grid_(resnet_map_grid(comm, kSize / 2, kSize / 2)),
      conv1_(register_module("conv1", make_conv(channels, 64, 7, 2, 3, stem_grid_, seed))),
      bn1_(register_module("bn1", make_bn(64, *conv1_))),
      max_pool_(nn::PoolKind::max, 2, 3, nn::PoolOptions{.stride = 2, .padding = 1}),
      stages_(register_stages(comm, seed)),
      by_channel_(pool_grid(stages_.back()->grid())),
      fc_(register_module("fc",
                          std::make_shared<nn::DistributedLinear<float>>(
                              512, kClasses, by_channel_.reshape(Shape{1, by_channel_.size()}),
                              nn::LinearOptions{.seed = seed + 100}))) {}

std::vector<std::shared_ptr<ResNet18::Stage>> ResNet18::register_stages(MPI_Comm comm,
                                                                        std::uint64_t seed) {
  std::vector<std::shared_ptr<Stage>> stages;
  std::int64_t in = 64, size = kSize / 4;
  for (int s = 0; s < 4; ++s) {
    const std::int64_t out = kWidths[s], stride = s == 0 ? 1 : 2;
    stages.push_back(
        register_module("layer" + std::to_string(s + 1),
                        std::make_shared<Stage>(in, out, stride, size, comm, seed + 10 * (s + 1))));
    in = out;
    size = stages.back()->out_size();
  }
  return stages;
}

Partition ResNet18::pool_grid(const Partition& last) {
  const auto p = static_cast<std::int64_t>(last.size());
  DISTOP_CHECK(512 % p == 0, kOp, "layer4 runs on ", p,
               " ranks, which do not divide its 512 channels for the average pool");
  return last.reshape(Shape{1, p, 1, 1});
}

TensorSpace ResNet18::input_space(std::int64_t batch) const {
  return conv1_->input_space(batch, Shape{kSize, kSize});
}

Var<float> ResNet18::forward(Tape& tape, const Var<float>& x) {
  auto h = nn::relu(tape, bn1_->forward(tape, conv1_->forward(tape, x)));
  h = max_pool_.forward(tape, h);
  for (auto& stage : stages_) h = stage->forward(tape, h);
  // The adaptive average pool to 1 x 1 reads whole maps: layer4's output split by channel.
  const std::int64_t batch = h.space().global_shape()[0];
  const TensorSpace pooled_in(h.space().global_shape(), by_channel_);
  if (h.space() != pooled_in) {
    auto& move = to_pool_[batch];
    if (!move) move = std::make_shared<const Repartition<float>>(h.space(), pooled_in);
    h = apply<float>(tape, move, h);
  }
  h = nn::flatten(tape, nn::mean(tape, h, {2, 3}, true), fc_->input_space(batch));
  return fc_->forward(tape, h);
}

std::string ResNet18::describe() const {
  auto grid = [](const Partition& p) { return p.str(); };
  std::string s = "  conv1: " + std::to_string(channels_) +
                  " -> 64, 7x7 stride 2 pad 3, bn1, ReLU, 3x3 max pool stride 2 on " +
                  grid(conv1_->weight_partition()) + "\n";
  std::int64_t size = kSize / 4;
  for (std::size_t s2 = 0; s2 < stages_.size(); ++s2) {
    const auto& st = *stages_[s2];
    s += "  layer" + std::to_string(s2 + 1) + ": two basic blocks to " +
         std::to_string(kWidths[s2]) + " channels, " + std::to_string(size) + " x " +
         std::to_string(size) + " -> " + std::to_string(st.out_size()) + " x " +
         std::to_string(st.out_size()) + ", on " + grid(st.grid()) + "\n";
    size = st.out_size();
  }
  s += "  average pool and fc 512 -> 10 on " + grid(fc_->weight_partition()) + "\n";
  return s;
}

train::ModelFootprint ResNet18::footprint(std::int64_t channels, int ranks) {
  train::ModelFootprint m;
  auto share = [ranks](std::int64_t size) {
    const auto [r, c] = map_grid(ranks, size, size);
    return 1.0 / static_cast<double>(r * c);
  };
  // A bias-free convolution whose weight one rank holds whole, and its batch norm and ReLU.
  auto conv = [&m](const std::string& name, std::int64_t in, std::int64_t out, std::int64_t k,
                   std::int64_t size, double sh) {
    const auto positions = static_cast<double>(size * size);
    const auto taps = static_cast<double>(in * k * k);
    m.add({name, static_cast<double>(out) * taps, static_cast<double>(out) * positions * sh,
           taps * positions * sh});
    m.elementwise(name + ".bn", static_cast<double>(out) * positions, sh);
    m.elementwise(name + ".relu", static_cast<double>(out) * positions, sh);
  };
  m.input(static_cast<double>(channels * kSize * kSize), share(kSize / 2));
  conv("conv1", channels, 64, 7, kSize / 2, share(kSize / 2));
  m.elementwise("maxpool", 64.0 * (kSize / 4) * (kSize / 4), share(kSize / 2));
  std::int64_t in = 64, size = kSize / 4;
  for (int s = 0; s < 4; ++s) {
    const std::int64_t out = kWidths[s], stride = s == 0 ? 1 : 2, o = size / stride;
    const std::string name = "layer" + std::to_string(s + 1);
    conv(name + ".0.conv1", in, out, 3, o, share(o));
    conv(name + ".0.conv2", out, out, 3, o, share(o));
    if (stride != 1) conv(name + ".0.downsample", in, out, 1, o, share(o));
    conv(name + ".1.conv1", out, out, 3, o, share(o));
    conv(name + ".1.conv2", out, out, 3, o, share(o));
    in = out;
    size = o;
  }
  m.linear("fc", 512, kClasses);
  return m;
}

data::Dataset pad_images(const data::Dataset& d, std::int64_t pad) {
  DISTOP_CHECK(pad >= 0, "pad_images", "the padding must be at least 0, found ", pad);
  data::Dataset out = d;
  out.rows = d.rows + 2 * pad;
  out.cols = d.cols + 2 * pad;
  out.images.assign(static_cast<std::size_t>(out.size * out.pixels()), 0.0f);
  for (std::int64_t i = 0; i < d.size; ++i)
    for (std::int64_t c = 0; c < d.channels; ++c)
      for (std::int64_t r = 0; r < d.rows; ++r) {
        const float* src = d.image(i) + (c * d.rows + r) * d.cols;
        float* dst =
            out.images.data() +
            static_cast<std::size_t>(i * out.pixels() + (c * out.rows + r + pad) * out.cols + pad);
        std::memcpy(dst, src, static_cast<std::size_t>(d.cols) * sizeof(float));
      }
  return out;
}

}  // namespace distop::examples
