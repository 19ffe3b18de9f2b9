// The Vision Transformer example as a user runs it: the losses of its tensor-parallel,
// data-parallel and combined runs against one rank's, the torch twin's state_dict names and
// shapes, CIFAR-10-format data, and bad flags. A tiny model (E 16, 4 heads, 2 blocks) on a small
// random Fashion-MNIST-like data set, so that each run takes about a second.
#include <gtest/gtest.h>

#include <algorithm>
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

constexpr std::int64_t kEmbed = 16, kMlp = 32, kDepth = 2;
const std::string kModel = "--embed-dim 16 --heads 4 --depth 2 --mlp-dim 32 ";

fs::path work() { return fs::path(DISTOP_VIT_WORK_DIR); }

const fs::path& data() {
  static const fs::path d = distop::test::write_small_idx_dataset(work() / "small", 64);
  return d;
}

// The tiny model on the small data set.
std::string small() { return kModel + "--data " + data().string() + " "; }

Outcome run_vit(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_VIT, ranks, "--quiet " + args, 120);
}

std::vector<double> read_losses(const fs::path& path) {
  std::ifstream in(path);
  std::vector<double> losses;
  long long step = 0;
  double loss = 0;
  while (in >> step >> loss) losses.push_back(loss);
  return losses;
}

// Three steps of 8 images in data order from the seed's initial weights, logging the losses as
// `name`.
std::vector<double> three_steps(int ranks, const std::string& name, const std::string& args) {
  const fs::path log = work() / ("losses." + name + ".txt");
  fs::remove(log);
  const auto o =
      run_vit(ranks, small() + "--steps 3 --batch-size 8 --no-shuffle --test-examples 0 " +
                         "--loss-log " + log.string() + " " + args);
  EXPECT_EQ(o.status, 0) << o.output;
  return read_losses(log);
}

// The twin's state_dict (examples/vit/torch_twin.py's ViT(channels, image, patch, E, 4, depth,
// F)): names and shapes, written from its definition.
std::vector<std::pair<std::string, Shape>> twin_state_dict(std::int64_t channels,
                                                           std::int64_t patch,
                                                           std::int64_t tokens) {
  const std::int64_t e = kEmbed, f = kMlp;
  std::vector<std::pair<std::string, Shape>> t{
      {"cls_token", Shape{1, 1, e}},
      {"pos_embedding", Shape{1, tokens, e}},
      {"patch_embed.weight", Shape{e, channels, patch, patch}},
      {"patch_embed.bias", Shape{e}}};
  for (std::int64_t i = 0; i < kDepth; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    t.emplace_back(p + "self_attn.in_proj_weight", Shape{3 * e, e});
    t.emplace_back(p + "self_attn.in_proj_bias", Shape{3 * e});
    t.emplace_back(p + "self_attn.out_proj.weight", Shape{e, e});
    t.emplace_back(p + "self_attn.out_proj.bias", Shape{e});
    t.emplace_back(p + "linear1.weight", Shape{f, e});
    t.emplace_back(p + "linear1.bias", Shape{f});
    t.emplace_back(p + "linear2.weight", Shape{e, f});
    t.emplace_back(p + "linear2.bias", Shape{e});
    for (const char* n : {"norm1", "norm2"}) {
      t.emplace_back(p + n + ".weight", Shape{e});
      t.emplace_back(p + n + ".bias", Shape{e});
    }
  }
  t.emplace_back("norm.weight", Shape{e});
  t.emplace_back("norm.bias", Shape{e});
  t.emplace_back("head.weight", Shape{10, e});
  t.emplace_back("head.bias", Shape{10});
  return t;
}

void expect_twin_state_dict(const fs::path& path, std::int64_t channels, std::int64_t patch,
                            std::int64_t tokens) {
  const auto f = SafetensorsFile::open(path.string());
  const auto want = twin_state_dict(channels, patch, tokens);
  std::vector<std::string> names;
  for (const auto& [name, shape] : want) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(f.names(), names);
  for (const auto& [name, shape] : want) {
    if (!f.contains(name)) continue;
    EXPECT_EQ(f.shape(name), shape) << name;
    EXPECT_EQ(f.dtype(name), "F32") << name;
  }
}

// One rank's three steps, run once for both tests.
const std::vector<double>& one_rank() {
  static const std::vector<double> losses = three_steps(1, "np1", "");
  return losses;
}

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want,
                        const std::string& run) {
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(got.size(), want.size()) << run;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-5 * want[i]) << run << ", step " << i + 1;
}

}  // namespace

// From the seed's weights (the same at any T) and the same data order, the losses of T = 2 and 4,
// two and four replicas and T = 2 with two replicas equal one rank's to float rounding.
TEST(ViT, LossesAgreeAcrossTensorAndDataParallelism) {
  const auto& one = one_rank();
  ASSERT_EQ(one.size(), 3u);
  for (const double l : one) ASSERT_TRUE(std::isfinite(l) && l > 0);
  expect_same_losses(three_steps(2, "np2t2", "--tensor-parallel 2"), one, "T = 2");
  expect_same_losses(three_steps(2, "np2r2", "--replicas 2"), one, "R = 2");
  expect_same_losses(three_steps(4, "np4t2r2", "--tensor-parallel 2 --replicas 2"), one,
                     "T = 2, R = 2");
  expect_same_losses(three_steps(4, "np4t4", "--tensor-parallel 4"), one, "T = 4");
}

// The tokens split over S ranks (9 + 8 of the 17 at S = 2, the class token in the first block),
// attention across the blocks by ring and by all-to-all attention, alone and with T or R: the
// same losses as one rank's (the blocks' parameters tied over the sequence ranks).
TEST(ViT, LossesAgreeWithSequenceParallelism) {
  const auto& one = one_rank();
  ASSERT_EQ(one.size(), 3u);
  expect_same_losses(three_steps(2, "np2s2ring", "--sequence-parallel 2 --sp-strategy ring"), one,
                     "S = 2, ring");
  expect_same_losses(
      three_steps(2, "np2s2alltoall", "--sequence-parallel 2 --sp-strategy alltoall"), one,
      "S = 2, all-to-all");
  expect_same_losses(
      three_steps(4, "np4s2t2", "--sequence-parallel 2 --tensor-parallel 2 --sp-strategy ring"),
      one, "S = 2 ring, T = 2");
  expect_same_losses(
      three_steps(4, "np4s2r2", "--sequence-parallel 2 --replicas 2 --sp-strategy alltoall"), one,
      "S = 2 all-to-all, R = 2");
}

// The saved weights are the torch twin's state_dict, name for name and shape for shape, at 1 rank,
// at T = 2 and at S = 2 (global tensors, in_proj in torch's order); the initial values are the
// same at all three, the class token zeros.
TEST(ViT, StateDictIsTheTwins) {
  const std::vector<std::pair<std::string, std::string>> runs{
      {"np1", ""}, {"t2", "--tensor-parallel 2"}, {"s2", "--sequence-parallel 2"}};
  std::vector<SafetensorsFile> saved;
  for (const auto& [name, args] : runs) {
    const fs::path path = work() / ("init." + name + ".safetensors");
    const auto o = run_vit(args.empty() ? 1 : 2, small() + "--epochs 0 --test-examples 0 --save " +
                                                     path.string() + " " + args);
    ASSERT_EQ(o.status, 0) << o.output;
    expect_twin_state_dict(path, 1, 7, 17);
    saved.push_back(SafetensorsFile::open(path.string()));
  }
  for (const auto& name : saved[0].names())
    for (std::size_t r = 1; r < saved.size(); ++r)
      EXPECT_EQ(saved[r].read<float>(name), saved[0].read<float>(name))
          << runs[r].first << " " << name;
  for (const float v : saved[0].read<float>("cls_token")) EXPECT_EQ(v, 0.0f);
}

// CIFAR-10-format data: three channels of 32 x 32, patches of 8 (16 + 1 tokens), T = 2.
TEST(ViT, TrainsOnCifar10FormatData) {
  const auto dir = work() / "cifar";
  distop::test::write_cifar10_dir(dir, 8, 6, 1);
  const auto saved = work() / "cifar.safetensors";
  const auto o = run_vit(2, kModel + "--dataset cifar10 --data " + dir.string() +
                                " --patch 8 --tensor-parallel 2 --steps 1 --batch-size 4 "
                                "--test-examples 2 --save " +
                                saved.string());
  ASSERT_EQ(o.status, 0) << o.output;
  expect_twin_state_dict(saved, 3, 8, 17);
  EXPECT_EQ(SafetensorsFile::open(saved.string()).metadata().at("dataset"), "cifar10");
}

TEST(ViT, BadFlagsAreClearErrors) {
  expect_clean_failure(run_vit(2, small() + "--tensor-parallel 4 --steps 1"),
                       "--tensor-parallel 4 x --sequence-parallel 1 x --replicas 1 = 4 ranks, but "
                       "the run has 2");
  expect_clean_failure(run_vit(2, "--data " + data().string() +
                                      " --tensor-parallel 2 --heads 3 --embed-dim 12 --steps 1"),
                       "--heads 3 is not a multiple of --tensor-parallel 2");
  expect_clean_failure(run_vit(1, small() + "--sp-strategy butterfly --steps 1"), "--sp-strategy");
  expect_clean_failure(run_vit(2, small() + "--sequence-parallel 2 --replicas 3 --steps 1"),
                       "--tensor-parallel 1 x --sequence-parallel 2 x --replicas 3 = 6 ranks, but "
                       "the run has 2");
  expect_clean_failure(run_vit(1, small() + "--patch 5 --steps 1"), "--patch 5 does not divide");
  expect_clean_failure(run_vit(1, "--dataset cifar10 --steps 1"), "--dataset cifar10 needs --data");
}
