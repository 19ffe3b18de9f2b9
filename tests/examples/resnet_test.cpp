// The ResNet-18 example as a user runs it: torchvision's state_dict, the losses of its spatially
// partitioned and data-parallel runs against one rank's, CIFAR-10-format data, and bad flags.
// The runs of the loss comparison are CTest tests of their own (tests/examples/CMakeLists.txt,
// resnet_losses.*), each logging its losses into DISTOP_RESNET_WORK_DIR.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cifar_files.hpp"
#include "distop/io/safetensors.hpp"
#include "run_example.hpp"
#include "small_idx_dataset.hpp"

namespace fs = std::filesystem;
using distop::Shape;
using distop::io::SafetensorsFile;
using distop::test::expect_clean_failure;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_RESNET_WORK_DIR); }

Outcome run_resnet(const std::string& args, int ranks = 1) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_RESNET, ranks,
                                   std::string("--quiet ") + args, 300);
}

// torchvision.models.resnet18(num_classes=10).state_dict() for images of `channels` channels:
// names, shapes and dtypes, written from torchvision's definition.
std::vector<std::pair<std::string, Shape>> torchvision_resnet18(std::int64_t channels) {
  std::vector<std::pair<std::string, Shape>> t;
  auto bn = [&t](const std::string& p, std::int64_t c) {
    for (const char* n : {"weight", "bias", "running_mean", "running_var"})
      t.emplace_back(p + "." + n, Shape{c});
    t.emplace_back(p + ".num_batches_tracked", Shape{});
  };
  t.emplace_back("conv1.weight", Shape{64, channels, 7, 7});
  bn("bn1", 64);
  std::int64_t in = 64;
  for (int s = 1; s <= 4; ++s) {
    const std::int64_t out = 64 << (s - 1);
    for (int b = 0; b < 2; ++b) {
      const std::string p = "layer" + std::to_string(s) + "." + std::to_string(b);
      const std::int64_t block_in = b == 0 ? in : out;
      t.emplace_back(p + ".conv1.weight", Shape{out, block_in, 3, 3});
      bn(p + ".bn1", out);
      t.emplace_back(p + ".conv2.weight", Shape{out, out, 3, 3});
      bn(p + ".bn2", out);
      if (b == 0 && s > 1) {
        t.emplace_back(p + ".downsample.0.weight", Shape{out, in, 1, 1});
        bn(p + ".downsample.1", out);
      }
    }
    in = out;
  }
  t.emplace_back("fc.weight", Shape{10, 512});
  t.emplace_back("fc.bias", Shape{10});
  return t;
}

void expect_torchvision_state_dict(const fs::path& path, std::int64_t channels) {
  const auto f = SafetensorsFile::open(path.string());
  auto want = torchvision_resnet18(channels);
  ASSERT_EQ(want.size(), 122u);
  std::vector<std::string> names;
  for (const auto& [name, shape] : want) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(f.names(), names);
  std::int64_t parameters = 0;
  for (const auto& [name, shape] : want) {
    if (!f.contains(name)) continue;
    EXPECT_EQ(f.shape(name), shape) << name;
    const bool counter = name.ends_with("num_batches_tracked");
    EXPECT_EQ(f.dtype(name), counter ? "I64" : "F32") << name;
    if (!counter && !name.ends_with("running_mean") && !name.ends_with("running_var"))
      parameters += f.shape(name).numel();
  }
  // torchvision's resnet18(num_classes=10) has 11,181,642 parameters with three input channels,
  // 6,272 fewer (64 x 2 x 7 x 7) with one.
  EXPECT_EQ(parameters, 11181642 - (3 - channels) * 64 * 49);
}

std::vector<double> read_losses(const std::string& run) {
  std::ifstream in(work() / ("losses." + run + ".txt"));
  std::vector<double> losses;
  long long step = 0;
  double loss = 0;
  while (in >> step >> loss) losses.push_back(loss);
  return losses;
}

}  // namespace

// The saved weights are torchvision's resnet18 state_dict, entry for entry, and the convolutions
// start from kaiming_normal_(mode="fan_out", nonlinearity="relu") as torchvision's do.
TEST(ResNet, StateDictIsTorchvisionsResnet18) {
  const auto path = work() / "init.safetensors";
  ASSERT_TRUE(fs::exists(path)) << "resnet_init did not run";
  expect_torchvision_state_dict(path, 1);
  const auto f = SafetensorsFile::open(path.string());
  const auto w = f.read<float>("layer3.1.conv2.weight");  // 256 x 256 x 3 x 3
  double sum = 0, squares = 0;
  for (const float v : w) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(w.size()), mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(squares / n - mean * mean), std::sqrt(2.0 / (256 * 9)), 2e-4);
  for (const float v : f.read<float>("bn1.weight")) EXPECT_EQ(v, 1.0f);
}

// From the same weights and data order, the losses of the spatially partitioned runs (2 x 1 and
// 2 x 2 grids) equal one rank's, and those of two replicas of a 2-rank model equal two replicas of
// one rank (batch norm's statistics are each replica's own, as in PyTorch's DDP), to float
// rounding.
TEST(ResNet, LossesAgreeAcrossGridsAndReplicas) {
  const auto one = read_losses("np1");
  ASSERT_EQ(one.size(), 2u) << "resnet_losses.np1 did not run";
  for (const double l : one) ASSERT_TRUE(std::isfinite(l) && l > 0);
  const std::pair<const char*, const char*> runs[] = {
      {"np2", "np1"}, {"np4", "np1"}, {"np4r2", "np2r2"}};
  for (const auto& [run, reference] : runs) {
    const auto want = read_losses(reference), got = read_losses(run);
    ASSERT_EQ(want.size(), one.size()) << reference;
    ASSERT_EQ(got.size(), want.size()) << run;
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4 * want[i])
          << run << " against " << reference << ", step " << i + 1;
  }
}

// CIFAR-10-format data: three channels, no padding; a 2 x 1 grid trains and saves torchvision's
// state_dict with conv1 taking three channels; evaluation on the first N test images.
TEST(ResNet, TrainsOnCifar10FormatData) {
  const auto data = work() / "cifar";
  distop::test::write_cifar10_dir(data, 8, 6, 1);
  const auto saved = work() / "cifar.safetensors";
  auto o = run_resnet("--dataset cifar10 --data " + data.string() +
                          " --steps 1 --batch-size 4 --test-examples 2 --save " + saved.string(),
                      2);
  ASSERT_EQ(o.status, 0) << o.output;
  expect_torchvision_state_dict(saved, 3);
  EXPECT_EQ(SafetensorsFile::open(saved.string()).metadata().at("dataset"), "cifar10");
}

TEST(ResNet, BadFlagsAreClearErrors) {
  const auto data = distop::test::write_small_idx_dataset(work() / "small", 16);
  expect_clean_failure(run_resnet("--dataset cifar10 --steps 1"), "--dataset cifar10 needs --data");
  expect_clean_failure(run_resnet("--dataset imagenet --steps 1"), "--dataset");
  expect_clean_failure(run_resnet("--data " + data.string() + " --test-examples -1"),
                       "--test-examples");
  // Three replicas of four ranks do not divide.
  expect_clean_failure(run_resnet("--data " + data.string() + " --steps 1 --replicas 3", 4),
                       "replicas do not divide");
}
