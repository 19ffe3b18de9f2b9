// The training driver's optimizers as a user runs them through the MLP example: every optimizer
// resumes from a checkpoint bit-identically at 2 ranks, a checkpoint of one optimizer does not
// load into another, and flags that do not apply to the chosen optimizer are errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_example.hpp"

namespace fs = std::filesystem;
using distop::test::expect_clean_failure;
using distop::test::file_bytes;
using distop::test::file_lines;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_MLP_WORK_DIR) / "optimizers"; }

Outcome run_mlp(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, ranks,
                                   std::string("--quiet --hidden 64 ") + args, 300);
}

struct OptimizerCase {
  const char* name;
  const char* flags;
};

class Optimizers : public ::testing::TestWithParam<OptimizerCase> {
 protected:
  void SetUp() override { fs::create_directories(work()); }
};

// Eight steps in one go, and four, a stop and four more from the checkpoint: the same losses and
// the same final weights, to the last bit, with a warm-up and a cosine schedule running across
// the stop.
TEST_P(Optimizers, ResumeContinuesExactlyAsAnUninterruptedRun) {
  const auto w = work() / GetParam().name;
  fs::remove_all(w);
  fs::create_directories(w);
  const std::string common =
      std::string(GetParam().flags) +
      " --warmup-steps 3 --lr-schedule cosine --epochs 1 --checkpoint-every 2";
  auto a = run_mlp(2, common + " --steps 8 --loss-log " + (w / "a.txt").string() + " --save " +
                          (w / "a.safetensors").string());
  ASSERT_EQ(a.status, 0) << a.output;
  auto b1 = run_mlp(2, common + " --steps 4 --loss-log " + (w / "b.txt").string() +
                           " --checkpoint-dir " + (w / "ckpt").string());
  ASSERT_EQ(b1.status, 0) << b1.output;
  auto b2 = run_mlp(2, common + " --steps 8 --resume --loss-log " + (w / "b.txt").string() +
                           " --checkpoint-dir " + (w / "ckpt").string() + " --save " +
                           (w / "b.safetensors").string());
  ASSERT_EQ(b2.status, 0) << b2.output;
  const auto la = file_lines(w / "a.txt");
  ASSERT_EQ(la.size(), 8u);
  EXPECT_EQ(la, file_lines(w / "b.txt"));
  EXPECT_EQ(file_bytes(w / "a.safetensors"), file_bytes(w / "b.safetensors"))
      << "the final weights differ";
  // Resuming with other hyper-parameters than the checkpoint's is an error naming the option.
  if (std::string(GetParam().name) == "adam")
    expect_clean_failure(run_mlp(2, common + " --eps 1e-6 --steps 8 --resume --checkpoint-dir " +
                                        (w / "ckpt").string()),
                         "Adam eps 1e-08, not 1e-06");
}

INSTANTIATE_TEST_SUITE_P(
    EveryOptimizer, Optimizers,
    ::testing::Values(OptimizerCase{"sgd", "--optimizer sgd --nesterov --weight-decay 1e-3"},
                      OptimizerCase{"adam", "--optimizer adam --lr 1e-3 --amsgrad"},
                      OptimizerCase{"adamw", "--optimizer adamw --lr 1e-3 --betas 0.8,0.99"},
                      OptimizerCase{"rmsprop",
                                    "--optimizer rmsprop --lr 1e-3 --centered --momentum 0.5"},
                      OptimizerCase{"adagrad", "--optimizer adagrad --eps 1e-9"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(OptimizerFlags, ACheckpointOfOneOptimizerIsNotLoadedIntoAnother) {
  const auto w = work() / "cross";
  fs::remove_all(w);
  ASSERT_EQ(run_mlp(2, "--optimizer adam --steps 2 --checkpoint-dir " + w.string()).status, 0);
  expect_clean_failure(
      run_mlp(2, "--optimizer sgd --steps 4 --resume --checkpoint-dir " + w.string()), "Adam");
}

TEST(OptimizerFlags, FlagsThatDoNotApplyAreErrors) {
  expect_clean_failure(run_mlp(2, "--optimizer adam --nesterov --steps 1"),
                       "--nesterov does not apply to --optimizer adam");
  expect_clean_failure(run_mlp(2, "--betas 0.9,0.99 --steps 1"),
                       "--betas does not apply to --optimizer sgd");
  expect_clean_failure(run_mlp(2, "--optimizer adagrad --momentum 0.9 --steps 1"),
                       "--momentum does not apply to --optimizer adagrad");
  expect_clean_failure(run_mlp(2, "--optimizer sgd --alpha 0.9 --steps 1"), "--alpha");
  expect_clean_failure(run_mlp(2, "--optimizer rmsprop --amsgrad --steps 1"), "--amsgrad");
  expect_clean_failure(run_mlp(2, "--optimizer adam --centered --steps 1"), "--centered");
  expect_clean_failure(run_mlp(2, "--optimizer nadam --steps 1"), "--optimizer");
  expect_clean_failure(run_mlp(2, "--optimizer adam --betas 0.9 --steps 1"), "--betas");
  expect_clean_failure(run_mlp(2, "--optimizer adam --betas 0.9,1.5 --steps 1"), "beta");
  expect_clean_failure(run_mlp(2, "--lr-schedule step --steps 1"), "--lr-step-size");
  expect_clean_failure(run_mlp(2, "--lr-step-size 3 --steps 1"), "--lr-step-size");
  expect_clean_failure(run_mlp(2, "--warmup-steps -1 --steps 1"), "--warmup-steps");
  // Flags that do apply run.
  EXPECT_EQ(run_mlp(2,
                    "--optimizer rmsprop --alpha 0.9 --eps 1e-7 --centered --steps 2 "
                    "--lr-schedule step --lr-step-size 1 --lr-gamma 0.5")
                .status,
            0);
}

// Values torch.optim refuses are errors naming the flag and the value, before any step.
TEST(OptimizerFlags, ValuesOutOfRangeAreErrorsNamingTheFlag) {
  expect_clean_failure(run_mlp(2, "--momentum -0.5 --steps 1"), "--momentum -0.5 is out of range");
  expect_clean_failure(run_mlp(2, "--optimizer rmsprop --alpha -1 --steps 1"),
                       "--alpha -1 is out of range");
  expect_clean_failure(run_mlp(2, "--optimizer adamw --weight-decay -0.01 --steps 1"),
                       "--weight-decay -0.01 is out of range");
  expect_clean_failure(run_mlp(2, "--optimizer adam --betas 1,0.999 --steps 1"),
                       "--betas 1,0.999 is out of range");
  expect_clean_failure(run_mlp(2, "--optimizer adagrad --eps -1e-10 --steps 1"),
                       "--eps -1e-10 is out of range");
  expect_clean_failure(run_mlp(2, "--lr-schedule step --lr-step-size 2 --lr-gamma -0.5 --steps 4"),
                       "--lr-gamma -0.5 is out of range");
}

// --momentum 2 (torch.optim.SGD accepts it) once made the loss grow to 6e15 without a word: now a
// warning naming the flag, once, on rank 0 alone, however often the schedule sets the learning
// rate; the optimizer's own warning on the same option stays silent after it. The run goes on.
TEST(OptimizerFlags, ValuesThatCannotBeMeantAreWarnedOfOnce) {
  struct Case {
    const char* flags;
    const char* warning;
  };
  for (const Case& c : {Case{"--momentum 2", "warning: mlp: --momentum 2 is above 1"},
                        Case{"--optimizer rmsprop --alpha 1 --allow-nonfinite",
                             "warning: mlp: --alpha 1 is not below 1"}}) {
    SCOPED_TRACE(c.flags);
    const auto o = run_mlp(2, std::string(c.flags) + " --steps 4 --lr-schedule cosine");
    EXPECT_EQ(o.status, 0) << o.output;
    std::size_t n = 0;
    for (auto at = o.output.find("warning:"); at != std::string::npos;
         at = o.output.find("warning:", at + 1))
      ++n;
    EXPECT_EQ(n, 1u) << o.output;
    EXPECT_NE(o.output.find(c.warning), std::string::npos) << o.output;
  }
}

}  // namespace
