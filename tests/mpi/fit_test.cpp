// train::fit with a user's own model and loss: a GELU written with make_function, a LayerNorm
// composed from operations, and a loss of the user's own, trained at one replica and at one replica
// per rank, with the same losses; and the driver's refusal of replicas that would drift apart.

#include "distop/train/fit.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/module.hpp"
#include "distop/nn/pointwise.hpp"
#include "distop/nn/reduction.hpp"
#include "distop/nn/softmax.hpp"
#include "distop/parallel/replicas.hpp"
#include "mpi_test_util.hpp"

namespace distop {
namespace {

// GELU, erf form: y = x Phi(x), dy/dx = Phi(x) + x phi(x). Written as a user would, with the
// forward form of make_function (the values on the host: a test program, not a kernel).
template <class T>
Var<T> gelu(Tape& tape, const Var<T>& x) {
  return make_function<T>(tape, "gelu", {x}, [&] {
    std::vector<T> v = x.value().local().to_vector();
    for (T& e : v) e = T(0.5) * e * (T(1) + std::erf(e / std::sqrt(T(2))));
    auto y = DistTensor<T>::uninitialized(x.space());
    y.local().copy_from(Tensor<T>::from_vector(y.local().shape(), v));
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      const std::vector<T> in = grads.input(0).value().local().to_vector();
                      std::vector<T> d = dy.local().to_vector();
                      const T pi = T(3.141592653589793238);
                      for (std::size_t i = 0; i < d.size(); ++i) {
                        const T e = in[i];
                        const T cdf = T(0.5) * (T(1) + std::erf(e / std::sqrt(T(2))));
                        const T pdf = std::exp(T(-0.5) * e * e) / std::sqrt(T(2) * pi);
                        d[i] *= cdf + e * pdf;
                      }
                      grads.add(0, [&] {
                        DistTensor<T> g = dy.clone();
                        g.local().copy_from(Tensor<T>::from_vector(g.local().shape(), d));
                        return g;
                      }());
                    }};
  });
}

// torch.nn.LayerNorm over the last axis, composed from operations (the statistics broadcast back
// over the rows, the weight and bias over the batch).
template <class T>
Var<T> layer_norm(Tape& tape, const Var<T>& x, const Var<T>& weight, const Var<T>& bias,
                  double eps) {
  const Var<T> centred = nn::sub(tape, x, nn::mean(tape, x, {-1}, true));
  const Var<T> variance = nn::mean(tape, nn::mul(tape, centred, centred), {-1}, true);
  const Var<T> normalised = nn::mul(tape, centred, nn::rsqrt(tape, nn::add(tape, variance, eps)));
  return nn::add(tape, nn::mul(tape, normalised, weight), bias);
}

constexpr std::int64_t kPixels = 16, kHidden = 12, kClasses = 4;

// 16 pixels -> fc1 -> GELU -> LayerNorm -> fc2 -> 4 logits, every layer on this replica's
// ranks (`comm`, one rank here), the batch split over `batch_grid` (one rank, or every rank to
// show the drift check).
class UserNet : public nn::Module<double> {
 public:
  UserNet(MPI_Comm comm, Partition batch_grid)
      : batch_grid_(std::move(batch_grid)),
        fc1_(register_module(
            "fc1", std::make_shared<nn::Linear<double>>(kPixels, kHidden, Partition(comm, Shape{1}),
                                                        nn::LinearOptions{.seed = 11}))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear<double>>(
                                        kHidden, kClasses, Partition(comm, Shape{1}),
                                        nn::LinearOptions{.seed = 12}))) {
    const TensorSpace features(Shape{kHidden}, Partition(comm, Shape{1}));
    DistTensor<double> ones(features);
    ones.local().fill(1.0);
    weight_ = register_parameter("norm_weight", Var<double>(std::move(ones), true));
    bias_ = register_parameter("norm_bias", Var<double>(DistTensor<double>(features), true));
  }
  TensorSpace input_space(std::int64_t batch) const {
    return TensorSpace(Shape{batch, kPixels}, batch_grid_);
  }
  Var<double> forward(Tape& tape, const Var<double>& x) {
    const Var<double> h = gelu(tape, fc1_->forward(tape, x));
    return fc2_->forward(tape, layer_norm(tape, h, weight_, bias_, 1e-5));
  }

 private:
  Partition batch_grid_;
  std::shared_ptr<nn::Linear<double>> fc1_, fc2_;
  Var<double> weight_, bias_;
};

// The user's loss: the mean squared distance between the softmax of the logits and the one-hot
// labels (the Brier score over the entries), composed from operations; its metric the accuracy.
class BrierLoss final : public train::Loss<double> {
 public:
  Var<double> forward(Tape& tape, const train::Model<double>& model,
                      const train::Batch& batch) override {
    auto x = DistTensor<double>::uninitialized(
        model.input_space(static_cast<std::int64_t>(batch.examples.size())));
    train::load_images(batch, x);
    const Var<double> logits = model.forward(tape, Var<double>(std::move(x)));
    labels_.clear();
    const std::int64_t first = logits.space().local_offset()[0];
    for (std::int64_t i = 0; i < logits.space().local_shape()[0]; ++i)
      labels_.push_back(batch.data.labels[static_cast<std::size_t>(
          batch.examples[static_cast<std::size_t>(first + i)])]);
    std::vector<double> hot(labels_.size() * kClasses, 0.0);
    for (std::size_t r = 0; r < labels_.size(); ++r)
      hot[r * kClasses + static_cast<std::size_t>(labels_[r])] = 1.0;
    DistTensor<double> target(logits.space());
    target.local().copy_from(Tensor<double>::from_vector(target.local().shape(), hot));
    const Var<double> d = nn::sub(tape, nn::softmax(tape, logits), Var<double>(target));
    correct_ = static_cast<double>(loss::count_correct(logits.value(), labels_));
    return nn::mean(tape, nn::mul(tape, d, d));
  }
  std::string metric_name() const override { return "accuracy"; }
  train::MetricShare metric() const override {
    return {correct_, static_cast<double>(labels_.size())};
  }

 private:
  std::vector<std::int32_t> labels_;
  double correct_ = 0;
};

// Class c of 4 lights quadrant c of a 4 x 4 image, over noise: learnable in a few steps.
data::Dataset quadrants(std::int64_t size, std::uint64_t seed) {
  data::Dataset d;
  d.size = size;
  d.rows = d.cols = 4;
  std::uint64_t s = seed;
  auto noise = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 40) & 0xffff) / 65536.0f * 0.4f;
  };
  for (std::int64_t i = 0; i < size; ++i) {
    const auto c = static_cast<std::int32_t>((i * 7 + 3) % kClasses);
    d.labels.push_back(c);
    for (std::int64_t p = 0; p < kPixels; ++p) {
      const std::int64_t r = p / 4, q = p % 4;
      const bool lit = (r / 2) * 2 + (q / 2) == c;
      d.images.push_back((lit ? 0.6f : 0.0f) + noise());
    }
  }
  return d;
}

train::TrainOptions options(int replicas) {
  train::TrainOptions o;
  o.epochs = 6;
  o.batch_size = 48;  // divided by 1-4 replicas
  o.no_shuffle = false;
  o.seed = 5;
  o.lr = 0.5;
  o.quiet = true;
  o.replicas = replicas;
  return o;
}

struct Recorded {
  std::vector<double> losses;
  std::vector<double> test_accuracy;
};

// fit on `comm` as `replicas` replicas (one rank each), recording the step losses.
Recorded train_on(MPI_Comm comm, int replicas, const data::Dataset& train,
                  const data::Dataset& test) {
  parallel::Replicas layout(comm, replicas);
  UserNet model(layout.model_comm(), Partition(layout.model_comm(), Shape{1, 1}));
  BrierLoss loss;
  Recorded run;
  train::FitContext context;
  context.program = "fit_test";
  context.replicas = &layout;
  context.callbacks.on_step = [&run](const train::StepReport& r) { run.losses.push_back(r.loss); };
  context.callbacks.on_evaluation = [&run](const train::EvaluationReport& r) {
    ASSERT_TRUE(r.metric.has_value());
    run.test_accuracy.push_back(*r.metric);
  };
  EXPECT_EQ(train::fit(model, loss, train, &test, options(replicas), context), 0);
  return run;
}

TEST(Fit, AUsersModelAndLossTrainAlikeAtOneReplicaAndAtOnePerRank) {
  const data::Dataset train = quadrants(144, 1), test = quadrants(64, 2);
  const int ranks = test::world_size();
  // The reference: one replica on this rank alone (every rank computes it).
  const Recorded one = train_on(MPI_COMM_SELF, 1, train, test);
  const Recorded all = train_on(MPI_COMM_WORLD, ranks, train, test);
  ASSERT_EQ(one.losses.size(), static_cast<std::size_t>(6 * 144 / 48));
  ASSERT_EQ(all.losses.size(), one.losses.size());
  for (std::size_t s = 0; s < one.losses.size(); ++s)
    EXPECT_NEAR(all.losses[s], one.losses[s], 1e-12 * std::abs(one.losses[s])) << "step " << s + 1;
  // It learns: the loss falls and the test accuracy ends well above chance (1/4).
  EXPECT_LT(one.losses.back(), 0.5 * one.losses.front());
  ASSERT_EQ(one.test_accuracy.size(), 7u);  // after each epoch and at the end
  EXPECT_GT(one.test_accuracy.back(), 0.9);
  for (std::size_t e = 0; e < one.test_accuracy.size(); ++e)
    EXPECT_DOUBLE_EQ(all.test_accuracy[e], one.test_accuracy[e]);
}

TEST(Fit, ALocalModelOnRanksThatReadDifferentExamplesIsRefused) {
  DISTOP_REQUIRE_RANKS(2);
  // One replica over every rank; each rank holds its own copy of the layers (a partition of its
  // own) but reads its share of the batch: nothing would average their gradients.
  const data::Dataset train = quadrants(144, 1);
  UserNet model(MPI_COMM_SELF, Partition::world(Shape{test::world_size(), 1}));
  BrierLoss loss;
  const std::string message = test::error_of(
      [&] { train::fit(model, loss, train, nullptr, options(1), {.program = "fit_test"}); });
  EXPECT_NE(message.find("parameter 'norm_weight' is held whole by ranks 0 and 1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("drift apart"), std::string::npos) << message;
}

}  // namespace
}  // namespace distop
