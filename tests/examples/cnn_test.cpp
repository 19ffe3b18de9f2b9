// The data-parallel CNN example as a user runs it: its state_dict names and shapes are a PyTorch
// module's, a resumed run continues exactly (dropout masks included), it trains on CIFAR-10, and
// bad data sets, checkpoints and rank counts are clear errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
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
using distop::test::file_bytes;
using distop::test::file_lines;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_CNN_WORK_DIR); }

Outcome run_cnn(const std::string& args, int ranks = 1) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_CNN, ranks,
                                   std::string("--quiet --batch-size 32 ") + args, 300);
}

// The state_dict of the network for `channels` x side x side images: a PyTorch module with
// attributes conv1, conv2, conv3, fc1, fc2 (and a dropout without state), in sorted order.
std::vector<std::pair<std::string, Shape>> expected_tensors(std::int64_t channels,
                                                            std::int64_t features) {
  return {{"conv1.bias", Shape{32}},  {"conv1.weight", Shape{32, channels, 3, 3}},
          {"conv2.bias", Shape{64}},  {"conv2.weight", Shape{64, 32, 3, 3}},
          {"conv3.bias", Shape{128}}, {"conv3.weight", Shape{128, 64, 3, 3}},
          {"fc1.bias", Shape{1024}},  {"fc1.weight", Shape{1024, features}},
          {"fc2.bias", Shape{10}},    {"fc2.weight", Shape{10, 1024}}};
}

// Checks the --save file's names, shapes and dtypes; returns its number of parameters.
std::int64_t expect_state_dict(const fs::path& path, std::int64_t channels, std::int64_t features) {
  const auto f = SafetensorsFile::open(path.string());
  const auto want = expected_tensors(channels, features);
  std::vector<std::string> names;
  for (const auto& [name, shape] : want) names.push_back(name);
  EXPECT_EQ(f.names(), names);
  std::int64_t count = 0;
  for (const auto& [name, shape] : want) {
    if (!f.contains(name)) continue;
    EXPECT_EQ(f.shape(name), shape) << name;
    EXPECT_EQ(f.dtype(name), "F32") << name;
    count += f.shape(name).numel();
  }
  return count;
}

// The checkpoint of `dir` rewritten with its metadata entry `key` set to `value` (none: left as it
// is) and the tensor `drop` left out (none: every tensor kept). With `checksums`, the checksums are
// made anew for the edited file (as a writer of a valid file would); without, the file keeps the
// old ones (as a file changed behind distop's back does).
void edit_checkpoint(const fs::path& dir, const std::string& key, const std::string& value,
                     const std::string& drop, bool checksums) {
  const fs::path path = dir / "checkpoint.safetensors";
  const auto f = SafetensorsFile::open(path.string());
  auto metadata = f.metadata();
  if (!key.empty()) {
    ASSERT_EQ(metadata.count(key), 1u) << key;
    metadata[key] = value;
  }
  std::vector<std::vector<std::byte>> bytes;
  std::vector<distop::io::TensorEntry> entries;
  const auto names = f.names();
  bytes.reserve(names.size());
  for (const auto& name : names) {
    if (name == drop) continue;
    bytes.push_back(f.read_bytes(name));
    entries.emplace_back(name, f.dtype(name), f.shape(name), bytes.back().data());
  }
  if (checksums) distop::io::add_checksums(entries, metadata);
  distop::io::write_safetensors(path.string(), entries, metadata);
}

}  // namespace

class Cnn : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = work() / info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  fs::path dir_;
};

TEST_F(Cnn, SavesTheStateDictOfAPyTorchModule) {
  auto o = run_cnn("--steps 3 --save " + (dir_ / "w.safetensors").string());
  ASSERT_EQ(o.status, 0) << o.output;
  // 1152 = 128 x 3 x 3 features into fc1; about 1.3 M parameters in all.
  EXPECT_EQ(expect_state_dict(dir_ / "w.safetensors", 1, 1152), 1283594);
  const auto meta = SafetensorsFile::open((dir_ / "w.safetensors").string()).metadata();
  EXPECT_EQ(meta.at("model"), "cnn");
  EXPECT_EQ(meta.at("dataset"), "fashion-mnist");
  EXPECT_EQ(meta.at("steps"), "3");
}

// Six steps in one go, and three steps, a stop, and three more from the checkpoint: the same
// losses to the last digit and the same final weights. The dropout masks of steps 4-6 depend on
// the call count the checkpoint carries.
TEST_F(Cnn, ResumeContinuesExactlyAsAnUninterruptedRun) {
  const auto w = dir_;
  const std::string data =
      "--data " + distop::test::write_small_idx_dataset(w / "data").string() + " ";
  auto a = run_cnn(data + "--steps 6 --loss-log " + (w / "a.txt").string() + " --save " +
                   (w / "a.safetensors").string() + " --checkpoint-dir " + (w / "ckpt-a").string());
  ASSERT_EQ(a.status, 0) << a.output;
  auto b1 = run_cnn(data + "--steps 3 --loss-log " + (w / "b.txt").string() + " --checkpoint-dir " +
                    (w / "ckpt-b").string());
  ASSERT_EQ(b1.status, 0) << b1.output;
  // The Dropout's call count, a buffer of the module held by the checkpoint.
  const auto checkpoint = SafetensorsFile::open((w / "ckpt-b" / "checkpoint.safetensors").string());
  EXPECT_EQ(checkpoint.read<std::int64_t>("dropout.calls"), std::vector<std::int64_t>{3});
  auto b2 =
      run_cnn(data + "--steps 6 --resume --loss-log " + (w / "b.txt").string() + " --save " +
              (w / "b.safetensors").string() + " --checkpoint-dir " + (w / "ckpt-b").string());
  ASSERT_EQ(b2.status, 0) << b2.output;
  const auto la = file_lines(w / "a.txt"), lb = file_lines(w / "b.txt");
  ASSERT_EQ(la.size(), 6u);
  EXPECT_EQ(la, lb);
  // (Not EXPECT_EQ, which would print megabytes of weights.)
  EXPECT_TRUE(file_bytes(w / "a.safetensors") == file_bytes(w / "b.safetensors"))
      << "the final weights differ";
}

// Resuming with settings the checkpoint contradicts, or from a checkpoint changed behind distop's
// back or missing a part, is an error naming what is wrong.
TEST_F(Cnn, AChangedOrIncompleteCheckpointIsAClearError) {
  const auto ckpt = dir_ / "ckpt";
  const std::string data =
      "--data " + distop::test::write_small_idx_dataset(dir_ / "data").string() + " ";
  auto o = run_cnn(data + "--steps 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(o.status, 0) << o.output;
  const std::string resume = data + "--steps 2 --resume --checkpoint-dir " + ckpt.string();
  // Another learning rate than the checkpoint's schedule would be dropped: refused, named.
  expect_clean_failure(run_cnn(resume + " --lr 0.5"), "was made with --lr 0.02, not 0.5");
  // One digit of the schedule's base learning rate: still valid JSON and a valid number, and a
  // resume would run at nine times the learning rate; the metadata's checksum finds it.
  const auto lr = SafetensorsFile::open((ckpt / "checkpoint.safetensors").string())
                      .metadata()
                      .at("scheduler.base_lr.0");
  std::string changed = lr;
  changed[changed.find('2')] = '9';  // 0.02 (the program's default) -> 0.09
  edit_checkpoint(ckpt, "scheduler.base_lr.0", changed, "", false);
  const auto corrupt = run_cnn(resume);
  expect_clean_failure(corrupt, "the metadata of file");
  expect_clean_failure(corrupt, "is corrupt: the CRC-32 of its entries is");
  // A checkpoint without the Dropout's call count (its masks would restart from call 0).
  o = run_cnn(data + "--steps 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(o.status, 0) << o.output;
  edit_checkpoint(ckpt, "", "", "dropout.calls", true);
  expect_clean_failure(run_cnn(resume), "dropout.calls");
}

TEST_F(Cnn, TrainsOnCifar10) {
  const auto data = dir_ / "cifar";
  distop::test::write_cifar10_dir(data, 40, 30, 1);  // 200 training and 30 test images
  auto o = run_cnn("--dataset cifar10 --data " + data.string() + " --steps 3 --save " +
                   (dir_ / "w.safetensors").string());
  ASSERT_EQ(o.status, 0) << o.output;
  // 3 input channels, 2048 = 128 x 4 x 4 features into fc1.
  expect_state_dict(dir_ / "w.safetensors", 3, 2048);
  EXPECT_EQ(SafetensorsFile::open((dir_ / "w.safetensors").string()).metadata().at("dataset"),
            "cifar10");
}

TEST_F(Cnn, BadDataSetsAreClearErrors) {
  auto bad = run_cnn("--dataset mnist --steps 1");
  EXPECT_NE(bad.status, 0) << bad.output;
  EXPECT_NE(bad.status, 124) << bad.output;
  EXPECT_NE(bad.output.find("--dataset: mnist not in {fashion-mnist,cifar10}"), std::string::npos)
      << bad.output;
  expect_clean_failure(run_cnn("--dataset cifar10 --steps 1"), "--dataset cifar10 needs --data");
  // A missing batch file, a record cut short, a label out of range.
  const auto data = dir_ / "cifar";
  distop::test::write_cifar10_dir(data, 2, 2, 1);
  fs::remove(data / "data_batch_2.bin");
  expect_clean_failure(run_cnn("--dataset cifar10 --steps 1 --data " + data.string()),
                       (data / "data_batch_2.bin").string() + " does not exist");
  distop::test::write_cifar10_dir(data, 2, 2, 1);
  fs::resize_file(data / "test_batch.bin", 3073 + 5);
  expect_clean_failure(run_cnn("--dataset cifar10 --steps 1 --data " + data.string()),
                       "not a whole number of 3073-byte records");
  auto records = distop::test::cifar10_records(2, 1);
  records[3073] = 10;
  distop::test::write_bytes(data / "test_batch.bin", records);
  expect_clean_failure(run_cnn("--dataset cifar10 --steps 1 --data " + data.string()),
                       "label 10 of record 1");
  // Fashion-MNIST's files are not there.
  expect_clean_failure(run_cnn("--steps 1 --data " + data.string()), "load_mnist_like");
}

// Purely data parallel: one replica per rank by default; another replica count is an error.
TEST_F(Cnn, TrainsAsOneReplicaPerRank) {
  const auto o = run_cnn("--steps 3", 2);
  EXPECT_EQ(o.status, 0) << o.output;
  expect_clean_failure(run_cnn("--steps 1 --replicas 1", 2),
                       "examples/cnn is purely data parallel: --replicas must be the rank count 2");
}

// A batch too large for the host's memory is an error naming --batch-size and the bytes, on every
// rank alike (no abort), before the model or a batch is allocated. A step holds at most the data
// set (60,000 images, 30,000 a rank), which a large host has room for: the test sets the memory the
// check holds the host's ranks against (DISTOP_HOST_MEMORY_BYTES, 200 MB).
TEST_F(Cnn, ABatchTooLargeForTheMemoryIsAnErrorNamingTheFlag) {
  const auto o = distop::test::run_example(
      std::string("env DISTOP_HOST_MEMORY_BYTES=200000000 ") + DISTOP_MPIEXEC, DISTOP_CNN, 2,
      "--quiet --steps 1 --batch-size 6400", 300);
  expect_clean_failure(o, "--batch-size 6400 needs ");
  EXPECT_NE(o.output.find("for the activations of 3200 examples"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("more than its 200000000 bytes of memory (DISTOP_HOST_MEMORY_BYTES)"),
            std::string::npos)
      << o.output;
}
