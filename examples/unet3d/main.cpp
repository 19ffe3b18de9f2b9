// A 3-D U-Net segmenting synthetic volumes (spheres and tubes in noise), every layer spatially
// partitioned over a 3-D grid of ranks, optionally also data parallel. Each rank generates only
// its own block of every volume: no rank ever holds a whole one.
//
//   mpiexec -n 4 build/examples/unet3d/unet3d --steps 40
//   mpiexec -n 4 build/examples/unet3d/unet3d --volume 64 --replicas 2 --up trilinear
//
// It prints each step's loss (binary cross-entropy with logits + soft Dice), the Dice score of the
// thresholded prediction on held-out volumes, the step time, and the most tensor memory any rank
// held: `peak memory per rank: N MiB`.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>
#include <fstream>
#include <vector>

#include "model.hpp"

using namespace distop;

namespace {

// The Dice score 2 |P n L| / (|P| + |L|) of the prediction logits > 0 against the labels, over
// every rank's boxes (collective over MPI_COMM_WORLD; 1 when both are empty).
double dice_score(const DistTensor<float>& logits, const DistTensor<float>& labels) {
  const auto p = to_host(logits.local()).to_vector();
  const auto l = to_host(labels.local()).to_vector();
  double sums[3] = {0, 0, 0};  // |P n L|, |P|, |L|
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double pred = p[i] > 0 ? 1.0 : 0.0;
    sums[0] += pred * l[i];
    sums[1] += pred;
    sums[2] += l[i];
  }
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                   "unet3d");
  return sums[1] + sums[2] > 0 ? 2 * sums[0] / (sums[1] + sums[2]) : 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> volume{32};
  std::int64_t batch = 2, steps = 30, eval_volumes = 4, keep_columns_mib = 0;
  int replicas = 1;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  std::string up = "transpose", loss_log;
  examples::UNetOptions model_options;
  CLI::App app{
      "A 3-D U-Net (distop example) segmenting synthetic volumes of spheres and tubes in noise: "
      "three levels of two 3x3x3 convolutions with GroupNorm and ReLU, 2x2x2 max pools down, "
      "transposed convolutions (or upsampling) up, skip concatenations, a 1x1x1 head; loss BCE "
      "with logits + soft Dice; Adam. Every layer runs on a 3-D grid of each replica's ranks (2 x "
      "1 x 1 at 2, 2 x 2 x 1 at 4, 2 x 2 x 2 at 8), each rank generating and holding only its "
      "block of every volume."};
  app.add_option("--volume", volume,
                 "The volumes' extents: S (an S^3 cube) or D,H,W; each a multiple of 4")
      ->delimiter(',')
      ->expected(1, 3)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", batch, "Volumes per step, over all replicas")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", steps, "Training steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--replicas", replicas, "Data-parallel replicas (dividing the ranks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", lr, "Adam's learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of the initial weights and of the data")
      ->capture_default_str();
  app.add_option("--base-channels", model_options.base_channels,
                 "Channels c of the first level (the others 2c and 4c)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--groups", model_options.groups, "GroupNorm's groups (dividing c)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--up", up, "transpose (2x2x2 transposed convolutions), trilinear or nearest")
      ->check(CLI::IsMember({"transpose", "trilinear", "nearest"}))
      ->capture_default_str();
  app.add_option("--eval-volumes", eval_volumes,
                 "Held-out volumes the Dice score is taken on after training (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--loss-log", loss_log, "Each step's loss, as 'step loss' lines (rank 0)");
  app.add_option("--keep-columns-mib", keep_columns_mib,
                 "MiB of im2col matrices each convolution may keep from forward for backward "
                 "(kernels::set_conv_kept_columns_limit; 0: none, the least memory)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return train::run_main(argc, argv, app, "unet3d", [&]() -> int {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    kernels::set_conv_kept_columns_limit(keep_columns_mib << 20);
    parallel::Replicas reps(MPI_COMM_WORLD, replicas);
    DISTOP_CHECK(batch % replicas == 0 && eval_volumes % replicas == 0, "unet3d", "--batch-size (",
                 batch, ") and --eval-volumes (", eval_volumes,
                 ") must be multiples of --replicas (", replicas, ")");
    model_options.seed = seed;
    model_options.up = up == "transpose"   ? examples::UNetUp::transpose
                       : up == "trilinear" ? examples::UNetUp::trilinear
                                           : examples::UNetUp::nearest;
    DISTOP_CHECK(volume.size() == 1 || volume.size() == 3, "unet3d",
                 "--volume takes S or D,H,W, found ", volume.size(), " values");
    const Shape extents = volume.size() == 1 ? Shape{volume[0], volume[0], volume[0]}
                                             : Shape{volume[0], volume[1], volume[2]};
    examples::UNet3d model(extents, model_options, reps.model_comm());
    parallel::DataParallel<float> dp(model, reps);
    optim::Adam<float> opt(model.parameters(), {.lr = lr});
    const examples::SyntheticVolumes data(extents, seed + 1000);
    if (rank == 0)
      std::printf("distop unet3d: %d rank%s, %d replica%s of %d, %s volumes, batch %lld\n%s", ranks,
                  ranks == 1 ? "" : "s", replicas, replicas == 1 ? "" : "s", ranks / replicas,
                  extents.str().c_str(), static_cast<long long>(batch), model.describe().c_str());
    std::ofstream log;
    if (rank == 0 && !loss_log.empty()) {
      log.open(loss_log);
      DISTOP_CHECK(log.good(), "unet3d", "cannot write --loss-log ", loss_log);
    }
    const std::int64_t per = batch / replicas;
    DistTensor<float> x(model.input_space(per)), y(x.space());
    reset_peak_tensor_memory();
    double seconds = 0, kept = 0;
    for (std::int64_t step = 1; step <= steps; ++step) {
      const double t0 = MPI_Wtime();
      data.fill((step - 1) * batch + reps.index() * per, x, y);
      Tape tape;
      const auto before = tensor_memory().in_use_bytes;
      auto logits = model.forward(tape, Var<float>(x));
      auto loss = nn::add(tape, loss::bce_with_logits(tape, logits, y),
                          loss::dice(tape, nn::sigmoid(tape, logits), y));
      // What the forward pass keeps for backward: the activations (transient buffers are gone).
      kept = std::max(kept, static_cast<double>(tensor_memory().in_use_bytes - before));
      dp.backward(tape, loss);
      opt.step();
      opt.zero_grad();
      // The replicas' mean loss: every rank of a replica holds its total.
      double value = loss::total(loss) / ranks;
      DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                       "unet3d");
      if (step > 1) seconds += MPI_Wtime() - t0;
      if (rank == 0) {
        if (log.is_open()) log << step << ' ' << value << '\n';
        if (step == 1 || step % 10 == 0 || step == steps)
          std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step), value);
      }
    }
    const auto train_peak = static_cast<double>(tensor_memory().peak_bytes);
    if (eval_volumes > 0) {
      const std::int64_t eval_per = eval_volumes / replicas;
      DistTensor<float> ex(model.input_space(eval_per)), ey(ex.space());
      data.fill(1'000'000 + reps.index() * eval_per, ex, ey);
      Tape tape;
      const auto logits = model.forward(tape, Var<float>(ex));
      const double dice = dice_score(logits.value(), ey);
      if (rank == 0)
        std::printf("dice on %lld held-out volumes: %.4f\n", static_cast<long long>(eval_volumes),
                    dice);
    }
    double peak[4] = {train_peak, -train_peak, kept, -kept};
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, peak, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                     "unet3d");
    if (rank == 0) {
      if (steps > 1)
        std::printf("step time: %.1f ms (mean of steps 2-%lld)\n",
                    1e3 * seconds / static_cast<double>(steps - 1), static_cast<long long>(steps));
      std::printf(
          "activation memory per rank: %.1f MiB (kept by the forward pass for backward; "
          "least on a rank %.1f MiB)\n",
          peak[2] / (1 << 20), -peak[3] / (1 << 20));
      std::printf("peak memory per rank: %.1f MiB (tensors, training; least on a rank %.1f MiB)\n",
                  peak[0] / (1 << 20), -peak[1] / (1 << 20));
    }
    return 0;
  });
}
