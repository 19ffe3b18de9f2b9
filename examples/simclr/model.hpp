#pragma once
// SimCLR's model: examples/cnn's convolutional encoder and a 2-layer projection head, replicated
// on every rank, each rank computing on its share of the batch; for the CLIP and SigLIP losses,
// their learnable scalars.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>

#include "../common/conv_features.hpp"

namespace distop::examples {

// The projection head: fc1 F -> hidden, ReLU, fc2 hidden -> out. Children "fc1", "fc2".
class ProjectionHead : public nn::Module<float> {
 public:
  ProjectionHead(std::int64_t in, std::int64_t hidden, std::int64_t out, std::uint64_t seed,
                 const Partition& replicas);
  Var<float> forward(Tape& tape, const Var<float>& h);
  std::int64_t out_features() const noexcept { return fc2_->out_features(); }
  std::string describe() const;

 private:
  std::shared_ptr<nn::Linear<float>> fc1_, fc2_;
};

// Which learnable scalars the contrastive loss has: none (NT-Xent, whose temperature is fixed),
// a logit scale (CLIP), or a logit scale and a bias (SigLIP).
enum class LossScalars { none, scale, scale_and_bias };

// The encoder ConvFeatures (1152 features for 1 x 28 x 28 images) and the projection head
// 1152 -> 512, ReLU, 512 -> 128. state_dict names: "encoder.conv1.weight" [32, 1, 3, 3],
// "encoder.conv1.bias", ..., "encoder.conv3.bias", "head.fc1.weight" [512, 1152], "head.fc1.bias",
// "head.fc2.weight" [128, 512], "head.fc2.bias"; with LossScalars::scale also "logit_scale" [1]
// (open_clip's parameter: the log of the scale, initialised to log(1 / 0.07)), with
// scale_and_bias "logit_scale" (log 10) and "logit_bias" (-10), SigLIP's initial values.
//
// The input's batch axis is split over the ranks of `comm` (balanced); the parameters are
// replicated over them (per_replica), the scalars included: each copy's gradient is that rank's
// share of the loss's gradient. The example runs it with `comm` one rank (one replica per rank).
// Encoder seeds seed, seed + 1, seed + 2; the head's seed + 3, seed + 4.
class SimCLRNet : public nn::Module<float> {
 public:
  static constexpr std::int64_t kHidden = 512;
  static constexpr std::int64_t kEmbedding = 128;

  SimCLRNet(std::int64_t channels, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
            LossScalars scalars, MPI_Comm comm = MPI_COMM_WORLD);

  // [batch, channels, rows, cols], the batch split over the ranks of `comm`. Error unless
  // batch >= the rank count.
  TensorSpace input_space(std::int64_t batch) const;
  // The encoder's features [batch, 1152] (what the linear probe reads).
  Var<float> features(Tape& tape, const Var<float>& x) { return encoder_->forward(tape, x); }
  // The projections [batch, 128]: head(encoder(x)), not normalised (the losses normalise).
  Var<float> forward(Tape& tape, const Var<float>& x);
  std::string describe() const;

  std::int64_t feature_count() const noexcept { return encoder_->features(); }
  // The channels of the encoder's last map (feature_count() / feature_channels() positions each).
  std::int64_t feature_channels() const noexcept { return encoder_->map_channels(); }
  ConvFeatures& encoder() noexcept { return *encoder_; }
  // The learnable scalars (undefined Vars where the loss has none).
  const Var<float>& logit_scale() const noexcept { return logit_scale_; }
  const Var<float>& logit_bias() const noexcept { return logit_bias_; }

 private:
  Partition replicas_;
  Partition batch_grid_;
  std::shared_ptr<ConvFeatures> encoder_;
  std::shared_ptr<ProjectionHead> head_;
  Var<float> logit_scale_, logit_bias_;
};

}  // namespace distop::examples
