// SimCLR on Fashion-MNIST (distop example): a convolutional encoder and a projection head trained
// without labels on two augmented views of every image, with a contrastive loss over the global
// batch sharded across the ranks (NT-Xent, or CLIP's or SigLIP's loss treating the two views as
// the two towers' inputs), then scored by a linear probe on the frozen encoder's features.
//
//   mpiexec.mpich -n 2 build/examples/simclr/simclr --temperature 0.2 --checkpoint-dir simclr-run
//   mpiexec.mpich -n 2 build/examples/simclr/simclr --probe-only          (the random encoder)
//
// Data parallel: one replica per rank, each taking batch-size / ranks images of every step; the
// loss couples all the replicas' rows (loss::ntxent and friends over MPI_COMM_WORLD, one loss
// spanning every replica, which parallel::DataParallel counts once). The loop is train::fit's,
// with a train::ContrastiveLoss of the two views: the driver's options, flags, checkpoints and
// logs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <distop/data/augment.hpp>
#include <distop/distop.hpp>
#include <distop/loss/contrastive.hpp>
#include <distop/train/cli.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model.hpp"
#include "probe.hpp"

namespace {

using namespace distop;
using examples::LossScalars;
using examples::SimCLRNet;

constexpr const char* kProgram = "simclr";

struct SimclrSettings {
  std::string loss = "ntxent";
  std::string strategy = "allgather";
  double temperature = 0.5;
  int root = 0;
  bool probe_only = false;
  bool no_probe = false;
  examples::ProbeOptions probe;
  data::AugmentOptions augment;
};

LossScalars scalars_of(const std::string& loss) {
  if (loss == "clip") return LossScalars::scale;
  if (loss == "siglip") return LossScalars::scale_and_bias;
  return LossScalars::none;
}

// The two augmented views of this rank's rows of a batch: row i of the local box is example
// batch.examples[offset + i]; view v of it is data::augment(seed, epoch, example, v).
void load_views(const train::Batch& batch, std::uint64_t seed, const data::AugmentOptions& augment,
                DistTensor<float>& a, DistTensor<float>& b) {
  const TensorSpace& space = a.space();
  const auto& local = space.local_shape();
  if (local.numel() == 0) return;
  const data::Dataset& d = batch.data;
  const std::int64_t r0 = space.local_offset()[0], n = d.pixels();
  const auto epoch = static_cast<std::uint64_t>(batch.epoch);
  // Augmented on the host, each view copied once into the model's memory space.
  auto va = HostTensor<float>::uninitialized(local), vb = HostTensor<float>::uninitialized(local);
  for (std::int64_t i = 0; i < local[0]; ++i) {
    const auto example = batch.examples[static_cast<std::size_t>(r0 + i)];
    const float* img = d.image(example);
    const auto sample = static_cast<std::uint64_t>(example);
    data::augment(img, d.channels, d.rows, d.cols, va.data() + i * n, seed, epoch, sample, 0,
                  augment);
    data::augment(img, d.channels, d.rows, d.cols, vb.data() + i * n, seed, epoch, sample, 1,
                  augment);
  }
  deep_copy(a.local(), va);
  deep_copy(b.local(), vb);
}

// The probe's result, on stdout (also with --quiet: it is the program's result).
void report_probe(const examples::ProbeResult& p, const char* what, bool writer) {
  if (!writer) return;
  std::printf(
      "linear probe (%s): test accuracy %.2f%% (train accuracy %.2f%%, loss %.4f; "
      "%lld training and %lld test images; features %.1f s, fit %.1f s)\n",
      what, 100.0 * p.test_accuracy, 100.0 * p.train_accuracy, p.train_loss,
      static_cast<long long>(p.train_examples), static_cast<long long>(p.test_examples),
      p.feature_seconds, p.fit_seconds);
}

int run(train::TrainOptions& o, SimclrSettings& s, bool replicas_given, bool temperature_given) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool talk = rank == 0 && !o.quiet;
  if (!replicas_given) o.replicas = ranks;
  DISTOP_CHECK(o.replicas == ranks, kProgram,
               "examples/simclr is purely data parallel: --replicas must be the rank count ", ranks,
               " (its default), found ", o.replicas);
  train::check_options(o, kProgram);
  data::check_augment_options(s.augment);
  DISTOP_CHECK(s.temperature > 0 && std::isfinite(s.temperature), kProgram,
               "--temperature must be positive, found ", s.temperature);
  DISTOP_CHECK(s.loss == "ntxent" || !temperature_given, kProgram,
               "--temperature is NT-Xent's; --loss ", s.loss, " learns its logits' scale");
  DISTOP_CHECK(s.root >= 0 && s.root < ranks, kProgram, "--root must be a rank in [0, ", ranks,
               "), found ", s.root);
  DISTOP_CHECK(o.batch_size % ranks == 0, kProgram, "--batch-size ", o.batch_size,
               " is the global batch; ", ranks,
               " ranks do not divide it (each replica takes batch-size / ranks examples)");
  (void)loss::parse_strategy(s.strategy);  // an unknown name is an Error before any work

  parallel::Replicas replicas(MPI_COMM_WORLD, ranks);
  const int r_index = replicas.index();
  const auto train_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, true);
  const auto test_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, false);
  {
    // The model and the two views of a batch must fit in memory, checked before anything large is
    // allocated: the encoder, the projection head and the views' projections.
    train::ModelFootprint footprint;
    const std::int64_t c = train_set.channels, h = train_set.rows, w = train_set.cols;
    footprint.input(static_cast<double>(c * h * w));
    examples::ConvFeatures::add_footprint(footprint, c, h, w);
    footprint.linear("head.fc1", examples::ConvFeatures::map_channels() * (h / 8) * (w / 8),
                     SimCLRNet::kHidden);
    footprint.elementwise("head.relu", SimCLRNet::kHidden);
    footprint.linear("head.fc2", SimCLRNet::kHidden, SimCLRNet::kEmbedding);
    train::check_training_fits(kProgram, footprint, 2 * train::examples_per_step(o, train_set.size),
                               o, ranks, "the model");
  }
  SimCLRNet model(train_set.channels, train_set.rows, train_set.cols, o.seed, scalars_of(s.loss),
                  replicas.model_comm());
  if (talk)  // train::fit describes the model and the data when it trains
    std::fprintf(stderr, "distop simclr: loss %s (%s), global batch %lld\n%s", s.loss.c_str(),
                 s.strategy.c_str(), static_cast<long long>(o.batch_size),
                 s.probe_only ? model.describe().c_str() : "");

  if (s.probe_only) {
    if (!o.init.empty()) io::load_state_dict(o.init, model);  // fit loads it when it trains
    const auto p =
        examples::linear_probe(model, train_set, test_set, s.probe, ranks, r_index, MPI_COMM_WORLD);
    report_probe(p, o.init.empty() ? "randomly initialised encoder" : o.init.c_str(), rank == 0);
    return 0;
  }

  // train::fit runs the loop (sampling, optimizer, schedule, data parallelism, --zero,
  // checkpoints, the checkpoint directory's lock, signals, logs, --trace, --profile, --save); each
  // step's loss is the contrastive loss of the two views' projections over the global batch. The
  // metrics CSV (default CHECKPOINT_DIR/metrics.csv) is "epoch,train_loss,seconds".
  using Contrastive = train::ContrastiveLoss<float>;
  Contrastive::Options options;
  options.kind = s.loss == "clip"     ? Contrastive::Kind::clip
                 : s.loss == "siglip" ? Contrastive::Kind::siglip
                                      : Contrastive::Kind::ntxent;
  options.temperature = s.temperature;
  options.contrastive = {.strategy = loss::parse_strategy(s.strategy), .root = s.root};
  if (s.loss != "ntxent") options.logit_scale = model.logit_scale();
  if (s.loss == "siglip") options.logit_bias = model.logit_bias();
  Contrastive loss([&](const train::Batch& batch, DistTensor<float>& xa,
                       DistTensor<float>& xb) { load_views(batch, o.seed, s.augment, xa, xb); },
                   MPI_COMM_WORLD, options);
  const int status = train::fit(model, loss, train_set, nullptr, o,
                                {.program = kProgram,
                                 .replicas = &replicas,
                                 .save_metadata = {{"model", kProgram}, {"loss", s.loss}}});
  if (status != 0) return status;
  if (!s.no_probe) {
    const auto p =
        examples::linear_probe(model, train_set, test_set, s.probe, ranks, r_index, MPI_COMM_WORLD);
    report_probe(p, "trained encoder", rank == 0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.epochs = 3;
  o.batch_size = 256;
  o.optimizer = "adam";
  o.lr = 1e-3;
  o.lr_schedule = "cosine";
  SimclrSettings s;
  // Crops of at least half the image (the library's default is a quarter): on 28 x 28 images the
  // smaller crops keep little of the garment (2-epoch runs at temperature 0.2: probe 88.36 %
  // against 88.16 % with 0.25, a small difference; docs/simclr.md).
  s.augment.crop_scale_min = 0.5;
  CLI::App app{
      "SimCLR on Fashion-MNIST (distop example): an encoder (conv1 1->32, conv2 32->64, conv3 "
      "64->128, 3x3 padding 1, each with ReLU and a 2x2 max pool: 1152 features) and a projection "
      "head (1152->512, ReLU, 512->128) trained on two augmented views of each image (random "
      "resized crop, horizontal flip, brightness and contrast jitter, Gaussian noise) with a "
      "contrastive loss over the global "
      "batch sharded across the ranks, then a linear probe (logistic regression on the frozen "
      "encoder's features) scored on the test set. One replica per rank, each taking "
      "batch-size / ranks images of every step."};
  train::add_training_options(app, o);
  app.get_option("--metrics")
      ->description(
          "Write the per-epoch loss and seconds here as CSV (rank 0): "
          "epoch,train_loss,seconds (default: CHECKPOINT_DIR/metrics.csv)");
  app.add_option("--loss", s.loss,
                 "ntxent (SimCLR), clip (InfoNCE with a learnable logit scale) or siglip (pairwise "
                 "sigmoid with a learnable scale and bias); clip and siglip take the two views as "
                 "the two towers' inputs")
      ->check(CLI::IsMember({"ntxent", "clip", "siglip"}))
      ->capture_default_str();
  app.add_option("--strategy", s.strategy,
                 "How the ranks share the loss: allgather-nograd, gather, allgather or ring "
                 "(docs/contrastive.md)")
      ->check(CLI::IsMember({"allgather-nograd", "gather", "allgather", "ring"}))
      ->capture_default_str();
  app.add_option("--root", s.root, "The rank that computes the loss with --strategy gather")
      ->capture_default_str();
  app.add_option("--temperature", s.temperature, "NT-Xent's temperature")->capture_default_str();
  app.add_option("--crop-scale", s.augment.crop_scale_min,
                 "Smallest area of the random crop, as a fraction of the image's")
      ->capture_default_str();
  app.add_option("--jitter-probability", s.augment.jitter_probability,
                 "Probability of a view's brightness and contrast jitter (0: none)")
      ->capture_default_str();
  app.add_option("--noise-std", s.augment.noise_std,
                 "Standard deviation of the Gaussian noise added to each pixel (pixels in [0, 1])")
      ->capture_default_str();
  app.add_flag("--probe-only", s.probe_only,
               "No training: the linear probe of the initial encoder (random, or --init's)");
  app.add_flag("--no-probe", s.no_probe, "Skip the linear probe after training");
  app.add_option("--probe-examples", s.probe.train_examples,
                 "The probe trains on the first this many training images (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--probe-epochs", s.probe.epochs,
                 "Passes of minibatch Adam of the probe's logistic regression")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--probe-lr", s.probe.lr, "Learning rate of the probe's Adam")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--probe-features", s.probe.features,
                 "What the probe reads: the encoder's flattened maps (flat, 1152 features) or "
                 "each channel averaged over its positions (pooled, 128)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, examples::ProbeOptions::Features>{
              {"flat", examples::ProbeOptions::Features::flat},
              {"pooled", examples::ProbeOptions::Features::pooled}},
          CLI::ignore_case))
      ->capture_default_str();
  return train::run_main(argc, argv, app, kProgram, [&] {
    return run(o, s, app.get_option("--replicas")->count() > 0,
               app.get_option("--temperature")->count() > 0);
  });
}
