// The MLP example meets bad input with a clear error, a non-zero exit status and no hang.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "distop/data/idx.hpp"
#include "distop/io/safetensors.hpp"
#include "run_example.hpp"

namespace fs = std::filesystem;

namespace {

using distop::test::expect_clean_failure;
using distop::test::file_bytes;
using distop::test::file_lines;
using distop::test::Outcome;

// Runs the example under mpiexec with a time limit (exit 124 means it hung).
Outcome run_mlp(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, ranks,
                                   std::string("--quiet ") + args);
}

fs::path work() { return fs::path(DISTOP_MLP_WORK_DIR) / "errors"; }

// A safetensors file with the MLP's tensors at the given shapes, leaving out `skip`.
void write_weights(const fs::path& path,
                   const std::vector<std::pair<std::string, distop::Shape>>& t,
                   const std::string& skip = "") {
  std::vector<std::vector<float>> storage;
  std::vector<distop::io::TensorEntry> entries;
  storage.reserve(t.size());
  for (const auto& [name, shape] : t) {
    if (name == skip) continue;
    storage.emplace_back(static_cast<std::size_t>(shape.numel()), 0.01f);
    entries.emplace_back(name, shape, storage.back().data());
  }
  distop::io::write_safetensors(path.string(), entries);
}

const std::vector<std::pair<std::string, distop::Shape>> kMlp = {
    {"fc1.weight", {256, 784}}, {"fc1.bias", {256}},       {"fc2.weight", {128, 256}},
    {"fc2.bias", {128}},        {"fc3.weight", {10, 128}}, {"fc3.bias", {10}}};

}  // namespace

class MlpErrors : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(work()); }
};

TEST_F(MlpErrors, MissingDataDirectory) {
  expect_clean_failure(run_mlp(2, "--data " + (work() / "nowhere").string()), "load_mnist_like");
}

TEST_F(MlpErrors, CorruptDataFile) {
  const auto dir = work() / "corrupt-data";
  fs::create_directories(dir);
  // A header that promises 100 images of 28 x 28, and data for 50.
  {
    distop::data::IdxArray full{{100, 28, 28}, std::vector<std::uint8_t>(100 * 28 * 28, 7)};
    distop::data::write_idx((dir / "train-images-idx3-ubyte").string(), full, false);
    fs::resize_file(dir / "train-images-idx3-ubyte", 16 + 50 * 28 * 28);
  }
  distop::data::IdxArray labels{{100}, std::vector<std::uint8_t>(100, 1)};
  distop::data::write_idx((dir / "train-labels-idx1-ubyte").string(), labels, false);
  auto o = run_mlp(2, "--data " + dir.string());
  expect_clean_failure(o, "train-images-idx3-ubyte");
}

TEST_F(MlpErrors, InitFileMissingATensor) {
  const auto f = work() / "missing-bias.safetensors";
  write_weights(f, kMlp, "fc2.bias");
  expect_clean_failure(run_mlp(2, "--steps 1 --init " + f.string()), "has no entry 'fc2.bias'");
}

TEST_F(MlpErrors, InitFileWithAWrongShape) {
  auto shapes = kMlp;
  shapes[2].second = distop::Shape{128, 255};
  const auto f = work() / "wrong-shape.safetensors";
  write_weights(f, shapes);
  expect_clean_failure(run_mlp(2, "--steps 1 --init " + f.string()), "fc2.weight");
}

TEST_F(MlpErrors, InitFileThatIsNotSafetensors) {
  const auto f = work() / "garbage.safetensors";
  std::ofstream(f) << "this is not a safetensors file";
  expect_clean_failure(run_mlp(2, "--steps 1 --init " + f.string()), f.filename().string());
}

TEST_F(MlpErrors, RankCountThePartitionCannotUse) {
  // Four ranks split each hidden layer two ways; one hidden feature cannot be split.
  expect_clean_failure(run_mlp(4, "--steps 1 --hidden 1"), "cannot be split");
}

TEST_F(MlpErrors, BadFlags) {
  expect_clean_failure(run_mlp(2, "--hidden 12,abc"), "--hidden");
  expect_clean_failure(run_mlp(2, "--lr-schedule linear"), "--lr-schedule");
  auto o = run_mlp(2, "--no-such-flag");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.status, 124);
  EXPECT_NE(o.output.find("no-such-flag"), std::string::npos) << o.output;
}

TEST_F(MlpErrors, NonFiniteLearningRate) {
  // Rejected as the flag is parsed (strict numbers), before check_options sees it.
  expect_clean_failure(run_mlp(2, "--steps 1 --lr inf"), "mlp: error: --lr: inf is not a finite");
}

// Files rank 0 writes are checked on rank 0 and agreed: no rank waits for one that failed.
TEST_F(MlpErrors, UnwritableOutputFilesFailAtTheStart) {
  const auto nowhere = work() / "no-such-dir";
  fs::remove_all(nowhere);
  expect_clean_failure(run_mlp(2, "--steps 1 --loss-log " + (nowhere / "loss.txt").string()),
                       "loss.txt");
  const auto o = run_mlp(2, "--steps 1 --save " + (nowhere / "w.safetensors").string());
  expect_clean_failure(o, "is not a writable directory");
  EXPECT_EQ(o.output.find("test accuracy"), std::string::npos)
      << "the bad --save path was found only after training:\n"
      << o.output;
}

// A run resumed with settings that its checkpoint's position or schedule depends on would go on
// from the wrong place or with another schedule; it stops with the setting it needs.
TEST_F(MlpErrors, ResumingWithOtherSettingsIsAnError) {
  const auto dir = work() / "resume-settings";
  fs::remove_all(dir);
  ASSERT_EQ(run_mlp(2, "--steps 2 --checkpoint-dir " + dir.string()).status, 0);
  const std::string resume = "--steps 4 --resume --checkpoint-dir " + dir.string();
  expect_clean_failure(run_mlp(2, resume + " --batch-size 30000"), "batch_size 32, not 30000");
  expect_clean_failure(run_mlp(2, resume + " --no-shuffle"), "shuffle true, not false");
  expect_clean_failure(run_mlp(2, resume + " --epochs 7"), "epochs 5, not 7");
  expect_clean_failure(run_mlp(2, resume + " --momentum 0.5"), "SGD momentum 0.9, not 0.5");
  EXPECT_EQ(run_mlp(2, resume).status, 0);
}

TEST_F(MlpErrors, BadHostCacheSettingIsReportedAndTheDefaultUsed) {
  // DISTOP_HOST_CACHE_MB bounds the pool of recycled tensor storage; a value that is not a number
  // of MiB is named on stderr and the run goes on with the default. 0 (no caching) is valid.
  auto run_with = [](const std::string& value) {
    return distop::test::run_example(
        std::string("env DISTOP_HOST_CACHE_MB=") + value + " " + DISTOP_MPIEXEC, DISTOP_MLP, 1,
        "--quiet --steps 2");
  };
  for (const char* bad : {"abc", "-5", "12MB"}) {
    const auto o = run_with(bad);
    EXPECT_EQ(o.status, 0) << o.output;
    EXPECT_NE(o.output.find(std::string("DISTOP_HOST_CACHE_MB='") + bad + "' is not a number"),
              std::string::npos)
        << o.output;
  }
  const auto o = run_with("0");
  EXPECT_EQ(o.status, 0) << o.output;
  EXPECT_EQ(o.output.find("DISTOP_HOST_CACHE_MB"), std::string::npos) << o.output;
}

// Data parallelism: a replica count that does not divide the ranks, or a global batch it does not
// divide, is an error before any step.
TEST_F(MlpErrors, ReplicasThatDoNotFitAreErrors) {
  expect_clean_failure(run_mlp(4, "--steps 1 --replicas 3"),
                       "3 replicas do not divide the 4 ranks");
  expect_clean_failure(run_mlp(2, "--steps 1 --replicas 2 --batch-size 31"),
                       "2 replicas do not divide it");
  expect_clean_failure(run_mlp(2, "--steps 1 --replicas 0"), "replica count must be at least 1");
}

// A model too large for the host is refused before anything large is allocated, at every rank
// count: the estimate is of what each rank holds of the model (its blocks of the weights), and the
// ranks of a host together are held against that host's memory. (Once, at 2 ranks, each rank's
// half was held against the whole host's memory: it passed, and the ranks allocated towards the
// OOM killer.) The time limit is short: a refusal takes seconds.
TEST_F(MlpErrors, AModelTooLargeForTheHostIsRefusedAtEveryRankCount) {
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(ranks);
    const auto o = distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, ranks,
                                             "--quiet --steps 1 --hidden 300000000", 60);
    expect_clean_failure(o, "--hidden 300000000 needs ");
    EXPECT_NE(o.output.find(std::string("the ") + std::to_string(ranks) +
                            (ranks == 1 ? " rank on host " : " ranks on host ")),
              std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find(" of memory"), std::string::npos) << o.output;
  }
}

// A batch whose activations do not fit is refused naming --batch-size (the model itself fits):
// 60,000 examples of a 300,000-wide hidden layer.
TEST_F(MlpErrors, ABatchTooLargeForTheHostIsRefusedNamingTheFlag) {
  const auto o = distop::test::run_example(
      DISTOP_MPIEXEC, DISTOP_MLP, 2, "--quiet --steps 1 --hidden 300000 --batch-size 60000", 60);
  expect_clean_failure(o, "--batch-size 60000 needs ");
  EXPECT_NE(o.output.find("for the activations of 60000 examples"), std::string::npos) << o.output;
}
