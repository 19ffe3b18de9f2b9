// docs/tutorial.md as one program: a small spatially partitioned CNN (conv 1 -> 8, 3x3, over a
// 2 x 2 grid of ranks; 2x2 max pool; a Repartition onto the classifier's ranks; a 1568 -> 10
// linear layer on a [1, 2] weight grid), trained for a few steps on one fixed batch of synthetic
// images: class k is a bright 5 x 5 square at its own place, on noise. It then takes the gradient
// of each example's class score with respect to its image (backward from a given output
// gradient), and saves the weights and loads them into a fresh model. It exits with 1 unless the
// loss fell to under half its first value (the batch is learnt), the reloaded model gives the
// same logits, and example 0's gradient is largest on its square.
//
//   mpiexec -n 4 build/examples/tutorial/tutorial [--steps N]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace distop;

namespace {

constexpr std::int64_t kBatch = 32;
constexpr std::int64_t kSide = 28;

// Pixel (r, c) of example n: noise in [0, 0.3), plus 1 inside the square of class n % 10 (rows
// 3 + 8 (k / 4), columns 3 + 6 (k % 4), 5 x 5).
float pixel(std::int64_t n, std::int64_t r, std::int64_t c) {
  const std::int64_t k = n % 10, top = 3 + 8 * (k / 4), left = 3 + 6 * (k % 4);
  const bool inside = r >= top && r < top + 5 && c >= left && c < left + 5;
  const auto index = static_cast<std::uint64_t>((n * kSide + r) * kSide + c);
  return static_cast<float>(0.3 * random::uniform(7, index) + (inside ? 1.0 : 0.0));
}

// [model]
// The network as a Module: its layers are children, so its parameters are named "conv.weight",
// "conv.bias", "fc.weight", "fc.bias" as in a PyTorch state_dict.
class TutorialCnn : public nn::Module<float> {
 public:
  TutorialCnn(std::uint64_t seed, std::int64_t batch)
      : conv_(register_module(
            "conv", std::make_shared<nn::DistributedConv<float>>(
                        2, 1, 8, 3, Partition::world(Shape{1, 1, 2, 2}),  // 2 x 2 spatial grid
                        nn::ConvOptions{.padding = 1, .seed = seed}))),
        pool_(nn::PoolKind::max, 2, 2),  // 2x2 max pool, stride 2
        fc_(register_module("fc", std::make_shared<nn::DistributedLinear<float>>(
                                      8 * 14 * 14, 10, Partition::world(Shape{1, 2}, {0, 1}),
                                      nn::LinearOptions{.seed = seed + 1}))),
        // The pooled maps split by channel over fc's input ranks: each rank's 4 channels are
        // exactly its block of fc's 1568 input features.
        to_fc_(std::make_shared<const Repartition<float>>(
            pool_.output_space(conv_->output_space(batch, Shape{kSide, kSide})),
            TensorSpace(Shape{batch, 8, 14, 14},
                        fc_->input_partition().reshape(Shape{1, 2, 1, 1})))),
        batch_(batch) {}

  TensorSpace input_space() const { return conv_->input_space(batch_, Shape{kSide, kSide}); }
  TensorSpace output_space() const { return fc_->output_space(batch_); }

  Var<float> forward(Tape& tape, const Var<float>& x) {
    auto h = pool_.forward(tape, nn::relu(tape, conv_->forward(tape, x)));
    h = nn::flatten(tape, apply<float>(tape, to_fc_, h), fc_->input_space(batch_));
    return fc_->forward(tape, h);  // [batch, 10] on rank 0
  }

 private:
  std::shared_ptr<nn::DistributedConv<float>> conv_;
  nn::DistributedPool<float> pool_;
  std::shared_ptr<nn::DistributedLinear<float>> fc_;
  std::shared_ptr<const Repartition<float>> to_fc_;
  std::int64_t batch_;
};
// [model]

// A file name every rank agrees on: rank 0's process id in the temporary directory.
std::string weights_path() {
  long long pid = static_cast<long long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() /
          ("distop_tutorial_" + std::to_string(pid) + ".safetensors"))
      .string();
}

// The logits of `model` for x, assembled on rank 0 (empty elsewhere).
std::vector<float> logits_on_rank0(TutorialCnn& model, const DistTensor<float>& x) {
  Tape tape;
  return assemble(model.forward(tape, Var<float>(x)).value(), 0);
}

int run(int steps) {
  const std::int64_t batch = kBatch;
  TutorialCnn model(/*seed=*/1, batch);

  // [data]
  // Every rank builds the whole batch [batch, 1, 28, 28] and keeps its own box of it.
  std::vector<float> images;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t r = 0; r < kSide; ++r)
      for (std::int64_t c = 0; c < kSide; ++c) images.push_back(pixel(n, r, c));
  DistTensor<float> x(model.input_space());
  distribute(images, x);  // this rank's quarter of every image
  const bool holds_logits = model.output_space().local_shape().numel() > 0;
  std::vector<std::int32_t> labels;  // on the rank holding the logits, empty elsewhere
  if (holds_logits)
    for (std::int64_t n = 0; n < batch; ++n) labels.push_back(static_cast<std::int32_t>(n % 10));
  // [data]

  // [train]
  optim::SGD<float> opt(model.parameters(), {.lr = 0.02, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 1; step <= steps; ++step) {
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    auto loss = loss::cross_entropy(tape, logits, labels);
    backward(tape, loss);  // the adjoints in reverse order, on every rank
    opt.step();
    opt.zero_grad();
    if (holds_logits) {
      last = loss.value().local().to_vector()[0];
      if (step == 1) first = last;
      if (step == 1 || step % 10 == 0 || step == steps)
        std::printf("step %3d  loss %.4f\n", step, last);
    }
  }
  // [train]

  // [saliency]
  // Backward from a given output gradient: d(logit of each example's class) / d(image), the
  // gradient of sum_n y[n, label_n]; dy is one-hot on the logits' rank (its box), empty elsewhere.
  Var<float> xin(x, /*requires_grad=*/true);
  Tape tape;
  Var<float> y = model.forward(tape, xin);
  DistTensor<float> dy(y.space());
  std::vector<float> onehot(static_cast<std::size_t>(batch * 10), 0.0f);
  for (std::int64_t n = 0; n < batch; ++n) onehot[static_cast<std::size_t>(n * 10 + n % 10)] = 1;
  distribute(onehot, dy);
  backward(tape, y, dy);
  const std::vector<float> saliency = assemble(xin.grad(), 0);  // [batch, 1, 28, 28] on rank 0
  // [saliency]

  // [weights]
  // Save the trained weights (PyTorch's names and layouts) and load them into a fresh model.
  const std::string path = weights_path();
  io::save_state_dict(path, model);
  TutorialCnn copy(/*seed=*/99, batch);
  io::load_state_dict(path, copy);  // strict: every tensor present, shapes as the model's
  // [weights]
  const bool same = logits_on_rank0(copy, x) == logits_on_rank0(model, x);
  if (world_rank() == 0) std::remove(path.c_str());

  // The verdicts of the rank holding the logits, on every rank.
  double salient = 0;  // the square of example 0's class outweighs the rest of its image
  if (holds_logits) {
    double inside = 0, outside = 0;
    for (std::int64_t r = 0; r < kSide; ++r)
      for (std::int64_t c = 0; c < kSide; ++c) {
        const double g = std::abs(saliency[static_cast<std::size_t>(r * kSide + c)]);
        (r >= 3 && r < 8 && c >= 3 && c < 8 ? inside : outside) += g;
      }
    salient = inside / 25 > outside / (kSide * kSide - 25) ? 1 : 0;
  }
  int ok[3] = {holds_logits && last < 0.5 * first ? 1 : 0, holds_logits && same ? 1 : 0,
               static_cast<int>(salient)};
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ok, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
                   "tutorial");
  if (holds_logits) {
    std::printf("loss %.4f -> %.4f: %s\n", first, last,
                ok[0] ? "the batch is learnt" : "FAILED to fall below half");
    std::printf("reloaded weights give %s logits\n", ok[1] ? "the same" : "DIFFERENT");
    std::printf("saliency of example 0 %s on its square\n", ok[2] ? "peaks" : "does NOT peak");
  }
  return ok[0] && ok[1] && ok[2] ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);  // MPI + Kokkos
  int steps = 30;
  CLI::App app{"docs/tutorial.md's CNN on a 2 x 2 grid of ranks (run it at 4 ranks)"};
  app.add_option("--steps", steps, "training steps on the fixed batch")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Every rank parses, and every rank must be given the same flags (train/cli.hpp).
  if (const auto status = train::parse_agreed(argc, argv, app, "tutorial")) return *status;
  if (size != 4) {
    if (rank == 0)
      std::fprintf(stderr, "tutorial: runs at 4 ranks (a 2 x 2 grid), found %d: mpiexec -n 4\n",
                   size);
    return 2;
  }
  try {
    return run(steps);
  } catch (const std::exception& e) {
    return env.report_error(e, "tutorial");  // rank 0 prints an error every rank raised
  }
}
