#include "model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace distop::examples {

namespace {

constexpr const char* kOp = "UNet3d";

int ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

std::shared_ptr<nn::DistributedConv<float>> conv3d(std::int64_t in, std::int64_t out,
                                                   std::int64_t kernel, const Partition& grid,
                                                   std::uint64_t seed) {
  return std::make_shared<nn::DistributedConv<float>>(
      3, in, out, kernel, grid, nn::ConvOptions{.padding = kernel / 2, .seed = seed});
}

}  // namespace

Shape unet_grid(int ranks) {
  std::array<std::int64_t, 3> g{1, 1, 1};
  // Each prime factor, largest first, to the axis with the fewest parts so far.
  std::vector<int> primes;
  for (int n = ranks, p = 2; n > 1; ++p)
    while (n % p == 0) {
      primes.push_back(p);
      n /= p;
    }
  std::sort(primes.rbegin(), primes.rend());
  for (const int p : primes) *std::min_element(g.begin(), g.end()) *= p;
  std::sort(g.rbegin(), g.rend());
  return Shape{1, 1, g[0], g[1], g[2]};
}

// conv 3x3x3, GroupNorm, ReLU, twice.
class UNet3d::Block : public nn::Module<float> {
 public:
  Block(std::int64_t in, std::int64_t out, std::int64_t groups, const Partition& grid,
        std::uint64_t seed)
      : conv1_(register_module("conv1", conv3d(in, out, 3, grid, seed))),
        norm1_(register_module("norm1", std::make_shared<nn::GroupNorm<float>>(
                                            groups, out, conv1_->output_partition()))),
        conv2_(register_module("conv2", conv3d(out, out, 3, grid, seed + 1))),
        norm2_(register_module("norm2", std::make_shared<nn::GroupNorm<float>>(
                                            groups, out, conv2_->output_partition()))) {}
  Var<float> forward(Tape& tape, const Var<float>& x) {
    auto h = nn::relu(tape, norm1_->forward(tape, conv1_->forward(tape, x)));
    return nn::relu(tape, norm2_->forward(tape, conv2_->forward(tape, h)));
  }

 private:
  std::shared_ptr<nn::DistributedConv<float>> conv1_;
  std::shared_ptr<nn::GroupNorm<float>> norm1_;
  std::shared_ptr<nn::DistributedConv<float>> conv2_;
  std::shared_ptr<nn::GroupNorm<float>> norm2_;
};

UNet3d::UNet3d(Shape volume, UNetOptions options, MPI_Comm comm)
    : volume_(std::move(volume)),
      options_(options),
      grid_(Partition(comm, unet_grid(ranks_of(comm)))),
      pool_(nn::PoolKind::max, 3, 2) {
  const std::int64_t c = options.base_channels, g = options.groups;
  DISTOP_CHECK(volume_.rank() == 3, kOp, "a volume has three extents, found ", volume_.str());
  for (int a = 0; a < 3; ++a) {
    const std::int64_t n = volume_[a];
    DISTOP_CHECK(n >= 4 && n % 4 == 0, kOp,
                 "the volume's extents must be multiples of 4 (two 2x2x2 pools), found ",
                 volume_.str());
    DISTOP_CHECK(n / 4 >= grid_.shape()[a + 2], kOp, "a ", volume_.str(), " volume over a ",
                 grid_.str(), " grid leaves the innermost level (", n / 4, " along axis ", a,
                 ") fewer voxels than ranks along an axis; use a larger volume "
                 "or fewer ranks");
  }
  DISTOP_CHECK(c >= 1 && g >= 1 && c % g == 0, kOp, "the base channels (", c,
               ") must be a positive multiple of the groups (", g, ")");
  const auto s = options.seed;
  const auto up = options.up;
  enc0_ = register_module("enc0", std::make_shared<Block>(1, c, g, grid_, s));
  enc1_ = register_module("enc1", std::make_shared<Block>(c, 2 * c, g, grid_, s + 10));
  mid_ = register_module("mid", std::make_shared<Block>(2 * c, 4 * c, g, grid_, s + 20));
  // With transposed convolutions the decoder's inputs are [2c from up1, 2c] and [c from up0, c];
  // with interpolation [4c, 2c] and [2c, c].
  const std::int64_t halve = up == UNetUp::transpose ? 2 : 1;
  if (up == UNetUp::transpose) {
    auto transpose = [&](const char* name, std::int64_t channels, std::uint64_t seed) {
      return register_module(name, std::make_shared<nn::DistributedConvTranspose<float>>(
                                       3, channels, channels / 2, 2, grid_,
                                       nn::ConvTransposeOptions{.stride = 2, .seed = seed}));
    };
    up1_ = transpose("up1", 4 * c, s + 30);
    dec1_ = register_module("dec1", std::make_shared<Block>(4 * c, 2 * c, g, grid_, s + 40));
    up0_ = transpose("up0", 2 * c, s + 50);
  } else {
    upsample_ = std::make_shared<nn::DistributedInterpolate<float>>(
        nn::InterpolateOptions{.scale_factor = 2.0,
                               .mode = up == UNetUp::trilinear ? nn::InterpolateMode::trilinear
                                                               : nn::InterpolateMode::nearest});
    dec1_ = register_module("dec1", std::make_shared<Block>(6 * c, 2 * c, g, grid_, s + 40));
  }
  dec0_ = register_module("dec0", std::make_shared<Block>(c + 2 * c / halve, c, g, grid_, s + 60));
  head_ = register_module("head", conv3d(c, 1, 1, grid_, s + 70));
}

TensorSpace UNet3d::input_space(std::int64_t batch) const {
  return TensorSpace(Shape{batch, 1, volume_[0], volume_[1], volume_[2]}, grid_);
}

Var<float> UNet3d::forward(Tape& tape, const Var<float>& x) {
  auto e0 = enc0_->forward(tape, x);
  auto e1 = enc1_->forward(tape, pool_.forward(tape, e0));
  auto m = mid_->forward(tape, pool_.forward(tape, e1));
  auto up = [&](const std::shared_ptr<nn::DistributedConvTranspose<float>>& transpose,
                const Var<float>& h) {
    return transpose ? transpose->forward(tape, h) : upsample_->forward(tape, h);
  };
  auto d1 = dec1_->forward(tape, nn::concat(tape, {up(up1_, m), e1}, 1));
  auto d0 = dec0_->forward(tape, nn::concat(tape, {up(up0_, d1), e0}, 1));
  return head_->forward(tape, d0);
}

std::string UNet3d::describe() const {
  const auto c = options_.base_channels;
  auto level = [this](std::int64_t scale) {
    return std::to_string(volume_[0] / scale) + " x " + std::to_string(volume_[1] / scale) + " x " +
           std::to_string(volume_[2] / scale);
  };
  const char* up = options_.up == UNetUp::transpose   ? "2x2x2 transposed convolution, stride 2"
                   : options_.up == UNetUp::trilinear ? "trilinear upsampling x2"
                                                      : "nearest upsampling x2";
  std::string s = "  every layer on " + grid_.str() + "\n";
  s += "  enc0: 1 -> " + std::to_string(c) + " at " + level(1) + "; enc1: -> " +
       std::to_string(2 * c) + " at " + level(2) + "; mid: -> " + std::to_string(4 * c) + " at " +
       level(4) + " (blocks: 2 x (conv 3x3x3, GroupNorm " + std::to_string(options_.groups) +
       ", ReLU); 2x2x2 max pools)\n";
  s += "  up: " + std::string(up) + "; dec1 at " + level(2) + ", dec0 at " + level(1) +
       " on [up, skip] concatenated; head 1x1x1 -> 1\n";
  return s;
}

namespace {

// A sphere (b == a) or a tube (a cylinder of radius r around the segment a-b).
struct Shape3 {
  std::array<double, 3> a, b;
  double r;
};

// Volume n's shapes: two spheres and two tubes, placed and sized by counter-based draws (sizes
// relative to the smallest extent).
std::vector<Shape3> shapes_of(std::uint64_t seed, std::int64_t n, const Shape& volume) {
  std::vector<Shape3> shapes;
  std::uint64_t k = static_cast<std::uint64_t>(n) * 64;
  auto draw = [&](double lo, double hi) { return lo + (hi - lo) * random::uniform(seed, k++); };
  const double S = static_cast<double>(std::min({volume[0], volume[1], volume[2]}));
  for (int i = 0; i < 4; ++i) {
    Shape3 s{};
    for (std::size_t a = 0; a < 3; ++a)
      s.a[a] = draw(0.15, 0.85) * static_cast<double>(volume[static_cast<int>(a)]);
    if (i < 2) {
      s.b = s.a;
      s.r = draw(0.08 * S, 0.18 * S);
    } else {
      for (std::size_t a = 0; a < 3; ++a)
        s.b[a] = draw(0.0, 1.0) * static_cast<double>(volume[static_cast<int>(a)]);
      s.r = draw(0.04 * S, 0.08 * S);
    }
    shapes.push_back(s);
  }
  return shapes;
}

bool inside(const Shape3& s, const std::array<double, 3>& p) {
  std::array<double, 3> ab{}, ap{};
  double len2 = 0, t = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    ab[i] = s.b[i] - s.a[i];
    ap[i] = p[i] - s.a[i];
    len2 += ab[i] * ab[i];
    t += ab[i] * ap[i];
  }
  t = len2 > 0 ? std::clamp(t / len2, 0.0, 1.0) : 0.0;
  double d2 = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double d = ap[i] - t * ab[i];
    d2 += d * d;
  }
  return d2 <= s.r * s.r;
}

}  // namespace

void SyntheticVolumes::fill(std::int64_t first, DistTensor<float>& x, DistTensor<float>& y) const {
  const auto& space = x.space();
  const Shape want{space.global_shape()[0], 1, volume_[0], volume_[1], volume_[2]};
  DISTOP_CHECK(space == y.space() && space.global_shape() == want, "SyntheticVolumes",
               "images and labels must both be ", want.str(), ", found ", space.str(), " and ",
               y.space().str());
  const Shape& box = space.local_shape();
  const auto& off = space.local_offset();
  auto xs = HostTensor<float>::uninitialized(box);
  auto ys = HostTensor<float>::uninitialized(box);
  float* xp = xs.data();
  float* yp = ys.data();
  const std::int64_t D = volume_[0], H = volume_[1], W = volume_[2];
  for (std::int64_t b = 0; b < box[0]; ++b) {
    const std::int64_t n = first + off[0] + b;
    const auto shapes = shapes_of(seed_, n, volume_);
    for (std::int64_t k = 0; k < box[2]; ++k)
      for (std::int64_t j = 0; j < box[3]; ++j)
        for (std::int64_t i = 0; i < box[4]; ++i) {
          const std::int64_t z = off[2] + k, r = off[3] + j, c = off[4] + i;
          const std::array<double, 3> p{static_cast<double>(z) + 0.5, static_cast<double>(r) + 0.5,
                                        static_cast<double>(c) + 0.5};
          bool in = false;
          for (const auto& s : shapes) in = in || inside(s, p);
          const auto index = static_cast<std::uint64_t>(((n * D + z) * H + r) * W + c);
          const double noise = noise_ * random::normal(seed_ + 1, index);
          *xp++ = static_cast<float>((in ? 1.0 : 0.0) + noise);
          *yp++ = in ? 1.0f : 0.0f;
        }
  }
  deep_copy(x.local(), xs);
  deep_copy(y.local(), ys);
}

}  // namespace distop::examples
