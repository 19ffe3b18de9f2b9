// The 3-D U-Net example as a user runs it: the same losses on every grid of ranks and with
// replicas, activation memory that falls with the ranks, learning, and bad flags.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run_example.hpp"

namespace fs = std::filesystem;
using distop::test::expect_clean_failure;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_UNET3D_WORK_DIR); }

Outcome run_unet(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_UNET3D, ranks, args, 300);
}

std::vector<double> read_losses(const fs::path& path) {
  std::ifstream in(path);
  std::vector<double> losses;
  long long step = 0;
  double loss = 0;
  while (in >> step >> loss) losses.push_back(loss);
  return losses;
}

// A number printed after `label` in the program's output.
double printed(const Outcome& o, const std::string& label) {
  const auto at = o.output.find(label);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no '" << label << "' in:\n" << o.output;
    return 0;
  }
  return std::strtod(o.output.c_str() + at + label.size(), nullptr);
}

// Two steps on 16^3 volumes (a small learning rate: Adam turns rounding-sized gradients into
// steps of the learning rate) with `args`, logging the losses as `name`.
void two_steps(int ranks, const std::string& name, const std::string& args) {
  fs::create_directories(work());
  auto o = run_unet(ranks, "--volume 16 --steps 2 --lr 1e-4 --eval-volumes 0 --loss-log " +
                               (work() / (name + ".txt")).string() + " " + args);
  EXPECT_EQ(o.status, 0) << o.output;
}

void expect_same_losses(const std::string& run, const std::string& reference) {
  const auto want = read_losses(work() / (reference + ".txt"));
  const auto got = read_losses(work() / (run + ".txt"));
  ASSERT_EQ(want.size(), 2u) << reference;
  ASSERT_EQ(got.size(), want.size()) << run;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * want[i])
        << run << " against " << reference << ", step " << i + 1;
}

}  // namespace

// The grids 1 x 1 x 1, 2 x 1 x 1 and 2 x 2 x 1 compute the same losses from the same seed and
// data (transposed convolutions up); two replicas of 2 ranks the same as two of 1 (trilinear up).
TEST(UNet3d, SameLossesOnEveryGrid) {
  two_steps(1, "np1", "");
  two_steps(2, "np2", "");
  two_steps(4, "np4", "");
  expect_same_losses("np2", "np1");
  expect_same_losses("np4", "np1");
  two_steps(2, "np2r2", "--replicas 2 --up trilinear");
  two_steps(4, "np4r2", "--replicas 2 --up trilinear");
  expect_same_losses("np4r2", "np2r2");
}

// On 32^3 volumes the activations a rank keeps for backward fall to under 0.6 of one rank's at 4
// ranks (0.46 measured: a quarter of the maps, plus each convolution's halo-padded input).
TEST(UNet3d, ActivationMemoryFallsWithTheRanks) {
  const auto one = run_unet(1, "--steps 1 --eval-volumes 0");
  const auto four = run_unet(4, "--steps 1 --eval-volumes 0");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(four.status, 0) << four.output;
  const double a1 = printed(one, "activation memory per rank: ");
  const double a4 = printed(four, "activation memory per rank: ");
  EXPECT_GT(a1, 10);
  EXPECT_LT(a4, 0.6 * a1) << "1 rank: " << a1 << " MiB, each of 4: " << a4 << " MiB";
  EXPECT_LT(printed(four, "peak memory per rank: "), 0.6 * printed(one, "peak memory per rank: "));
}

// Forty steps on one rank learn the shapes: the Dice score on held-out volumes passes 0.5 (a
// prediction of nothing scores 0).
TEST(UNet3d, Learns) {
  const auto o = run_unet(1, "--volume 16 --steps 40 --eval-volumes 4 --up nearest");
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_GT(printed(o, "dice on 4 held-out volumes: "), 0.5) << o.output;
}

TEST(UNet3d, BadFlagsAreClearErrors) {
  expect_clean_failure(run_unet(1, "--volume 18 --steps 1"), "multiples of 4");
  expect_clean_failure(run_unet(1, "--volume 16,8 --steps 1"), "--volume takes S or D,H,W");
  expect_clean_failure(run_unet(1, "--base-channels 6 --groups 4 --steps 1"),
                       "multiple of the groups");
  expect_clean_failure(run_unet(2, "--replicas 2 --batch-size 3 --steps 1"),
                       "multiples of --replicas");
  expect_clean_failure(run_unet(4, "--volume 4 --steps 1"), "fewer voxels than ranks");
  expect_clean_failure(run_unet(1, "--up bicubic"), "--up");
}
