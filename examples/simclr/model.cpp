#include "model.hpp"

#include <cmath>
#include <vector>

namespace distop::examples {

namespace {

int ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

// A learnable scalar: global shape [1], replicated over `replicas`.
Var<float> scalar_parameter(const Partition& replicas, double value) {
  const TensorSpace space(Shape{1}, replicas);
  return Var<float>(
      DistTensor<float>::from_local(
          space, Tensor<float>::from_vector(space.local_shape(), {static_cast<float>(value)})),
      true);
}

}  // namespace

ProjectionHead::ProjectionHead(std::int64_t in, std::int64_t hidden, std::int64_t out,
                               std::uint64_t seed, const Partition& replicas)
    : fc1_(register_module("fc1", std::make_shared<nn::Linear<float>>(
                                      in, hidden, replicas, nn::LinearOptions{.seed = seed}))),
      fc2_(register_module(
          "fc2", std::make_shared<nn::Linear<float>>(hidden, out, replicas,
                                                     nn::LinearOptions{.seed = seed + 1}))) {}

Var<float> ProjectionHead::forward(Tape& tape, const Var<float>& h) {
  return fc2_->forward(tape, nn::relu(tape, fc1_->forward(tape, h)));
}

std::string ProjectionHead::describe() const {
  return "  head.fc1: " + std::to_string(fc1_->in_features()) + " -> " +
         std::to_string(fc1_->out_features()) +
         ", ReLU\n  head.fc2: " + std::to_string(fc2_->in_features()) + " -> " +
         std::to_string(fc2_->out_features()) + "\n";
}

SimCLRNet::SimCLRNet(std::int64_t channels, std::int64_t rows, std::int64_t cols,
                     std::uint64_t seed, LossScalars scalars, MPI_Comm comm)
    : replicas_(Partition(comm, Shape{ranks_of(comm)})),
      batch_grid_(replicas_.reshape(Shape{ranks_of(comm), 1, 1, 1})),
      encoder_(register_module(
          "encoder", std::make_shared<ConvFeatures>(channels, rows, cols, seed, replicas_))),
      head_(register_module(
          "head", std::make_shared<ProjectionHead>(encoder_->features(), kHidden, kEmbedding,
                                                   seed + 3, replicas_))) {
  if (scalars == LossScalars::scale) {
    logit_scale_ =
        register_parameter("logit_scale", scalar_parameter(replicas_, std::log(1 / 0.07)));
  } else if (scalars == LossScalars::scale_and_bias) {
    logit_scale_ = register_parameter("logit_scale", scalar_parameter(replicas_, std::log(10.0)));
    logit_bias_ = register_parameter("logit_bias", scalar_parameter(replicas_, -10.0));
  }
}

TensorSpace SimCLRNet::input_space(std::int64_t batch) const {
  DISTOP_CHECK(batch >= batch_grid_.size(), "SimCLRNet", "a batch of ", batch,
               " examples cannot be split over ", batch_grid_.size(),
               " ranks: every rank needs one at least");
  return TensorSpace(Shape{batch, encoder_->channels(), encoder_->rows(), encoder_->cols()},
                     batch_grid_);
}

Var<float> SimCLRNet::forward(Tape& tape, const Var<float>& x) {
  return head_->forward(tape, encoder_->forward(tape, x));
}

std::string SimCLRNet::describe() const {
  std::string s("  data parallel: the batch split over ");
  s += batch_grid_.str();
  s += ", every layer replicated on each\n";
  s += encoder_->describe("encoder.");
  s += head_->describe();
  if (logit_scale_.defined()) s += "  logit_scale: learnable (the log of the logits' scale)\n";
  if (logit_bias_.defined()) s += "  logit_bias: learnable\n";
  return s;
}

}  // namespace distop::examples
