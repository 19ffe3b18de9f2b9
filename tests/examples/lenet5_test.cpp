// The LeNet-5 example as a user runs it: checkpoints that resume a run exactly, the metrics CSV,
// and clear errors for checkpoints that are corrupt or of another model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_example.hpp"
#include "small_idx_dataset.hpp"

namespace fs = std::filesystem;
using distop::test::expect_clean_failure;
using distop::test::file_bytes;
using distop::test::file_lines;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_LENET5_WORK_DIR) / "resume"; }

Outcome run_lenet(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_LENET5, ranks,
                                   std::string("--quiet --batch-size 32 ") + args, 300);
}

}  // namespace

class Lenet5 : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::remove_all(work());
    fs::create_directories(work());
  }
};

// Twelve steps in one go, and six steps, a stop, and six more from the checkpoint: the losses of
// steps 7-12 are the same to the last digit (and each step is logged once), and so are the final
// weights.
TEST_F(Lenet5, ResumeContinuesExactlyAsAnUninterruptedRun) {
  const auto w = work();
  auto a = run_lenet(2, "--steps 12 --loss-log " + (w / "a.txt").string() + " --save " +
                            (w / "a.safetensors").string() + " --checkpoint-dir " +
                            (w / "ckpt-a").string());
  ASSERT_EQ(a.status, 0) << a.output;
  auto b1 = run_lenet(2, "--steps 6 --loss-log " + (w / "b.txt").string() + " --checkpoint-dir " +
                             (w / "ckpt-b").string());
  ASSERT_EQ(b1.status, 0) << b1.output;
  ASSERT_TRUE(fs::exists(w / "ckpt-b" / "checkpoint.safetensors"));
  // As if the run had gone on past its checkpoint before it died: the resumed run drops the
  // losses of steps after the checkpoint and logs them again.
  std::ofstream(w / "b.txt", std::ios::app) << "7 123\n8 456\n9 7";
  auto b2 = run_lenet(2, "--steps 12 --resume --loss-log " + (w / "b.txt").string() + " --save " +
                             (w / "b.safetensors").string() + " --checkpoint-dir " +
                             (w / "ckpt-b").string());
  ASSERT_EQ(b2.status, 0) << b2.output;
  const auto la = file_lines(w / "a.txt"), lb = file_lines(w / "b.txt");
  ASSERT_EQ(la.size(), 12u);
  EXPECT_EQ(la, lb);
  std::ifstream fa(w / "a.safetensors", std::ios::binary),
      fb(w / "b.safetensors", std::ios::binary);
  std::stringstream sa, sb;
  sa << fa.rdbuf();
  sb << fb.rdbuf();
  EXPECT_EQ(sa.str(), sb.str()) << "the final weights differ";
}

TEST_F(Lenet5, CorruptOrForeignCheckpointsAreClearErrors) {
  const auto dir = work() / "ckpt";
  fs::create_directories(dir);
  // No checkpoint at all.
  expect_clean_failure(run_lenet(2, "--steps 1 --resume --checkpoint-dir " + dir.string()),
                       "load_checkpoint");
  // A truncated file.
  {
    std::ofstream out(dir / "checkpoint.safetensors", std::ios::binary);
    out << "\x40\x00\x00\x00\x00\x00\x00\x00{\"conv1.weight\":";
  }
  expect_clean_failure(run_lenet(2, "--steps 1 --resume --checkpoint-dir " + dir.string()),
                       "load_checkpoint");
  // A checkpoint of another model: the MLP's.
  fs::remove_all(dir);
  auto mlp = distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, 1,
                                       "--quiet --steps 1 --checkpoint-dir " + dir.string());
  ASSERT_EQ(mlp.status, 0) << mlp.output;
  expect_clean_failure(run_lenet(2, "--steps 2 --resume --checkpoint-dir " + dir.string()),
                       "conv1.weight");
  // --resume without a directory.
  expect_clean_failure(run_lenet(1, "--steps 1 --resume"), "--resume needs --checkpoint-dir");
}

TEST_F(Lenet5, WritesOneMetricsRowPerEpoch) {
  const auto csv = work() / "metrics.csv";
  // A whole epoch is too long for a test (the CSV writer's rows are unit-tested): this checks
  // that the file is made with its header and gets no row for an epoch a --steps stop cut short.
  auto o = run_lenet(2, "--epochs 1 --steps 3 --metrics " + csv.string());
  ASSERT_EQ(o.status, 0) << o.output;
  const auto l = file_lines(csv);
  ASSERT_GE(l.size(), 1u);
  EXPECT_EQ(l[0], "epoch,train_loss,train_accuracy,test_accuracy,seconds");
  EXPECT_EQ(l.size(), 1u) << "a row for an epoch that did not finish";
}

// A --batch-size larger than the training set: a step holds the whole set, not the batch, and
// the memory check counts what a step holds, so the run trains. (Once, the check counted the
// whole --batch-size and refused 1,000,000 on a 2,000-image set as needing 61.3 GB.) A batch that
// does not fit in memory is refused naming the flag (mlp_errors_test).
TEST_F(Lenet5, ABatchLargerThanTheDataSetTrainsOnTheWholeSet) {
  const auto data = distop::test::write_small_idx_dataset(work() / "data", 2000);
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(ranks);
    const auto log = work() / ("loss.np" + std::to_string(ranks) + ".txt");
    const auto o = distop::test::run_example(DISTOP_MPIEXEC, DISTOP_LENET5, ranks,
                                             "--quiet --batch-size 1000000 --epochs 2 --data " +
                                                 data.string() + " --loss-log " + log.string(),
                                             300);
    ASSERT_EQ(o.status, 0) << o.output;
    EXPECT_EQ(file_lines(log).size(), 2u) << "one step per epoch, of the whole set";
  }
}
