// The SimCLR example as a user runs it: its state_dict names, the same losses at 1 and 2 ranks for
// every loss and strategy (from the same initial weights, in file order), exact resumes, the
// linear probe at 1 and 2 ranks, and bad flags as clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "distop/core/random.hpp"
#include "distop/data/idx.hpp"
#include "distop/io/safetensors.hpp"
#include "run_example.hpp"

namespace fs = std::filesystem;
using distop::Shape;
using distop::io::SafetensorsFile;
using distop::test::expect_clean_failure;
using distop::test::file_bytes;
using distop::test::file_lines;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_SIMCLR_WORK_DIR); }

Outcome run_simclr(const std::string& args, int ranks = 1) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_SIMCLR, ranks,
                                   std::string("--quiet --batch-size 32 ") + args, 300);
}

// A small Fashion-MNIST-like data set (256 training and 64 test images of 28 x 28): smooth blobs
// whose position is the label, so that a probe has something to find, and each run's data
// loading and probe take milliseconds.
fs::path write_small_data_set(const fs::path& dir) {
  fs::create_directories(dir);
  for (const bool train : {true, false}) {
    const std::int64_t n = train ? 256 : 64;
    distop::data::IdxArray images{{n, 28, 28}, {}}, labels{{n}, {}};
    for (std::int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(i % 10);
      const double cy = 6 + 16 * (label / 5) + 2 * distop::random::uniform(train, 2 * i);
      const double cx = 4 + 5 * (label % 5) + 2 * distop::random::uniform(train, 2 * i + 1);
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          const double d2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
          images.data.push_back(static_cast<std::uint8_t>(255 * std::exp(-d2 / 18)));
        }
      labels.data.push_back(static_cast<std::uint8_t>(label));
    }
    const std::string stem = train ? "train" : "t10k";
    distop::data::write_idx((dir / (stem + "-images-idx3-ubyte")).string(), images, false);
    distop::data::write_idx((dir / (stem + "-labels-idx1-ubyte")).string(), labels, false);
  }
  return dir;
}

// The losses of a --loss-log file, in step order.
std::vector<double> losses(const fs::path& path) {
  std::vector<double> v;
  for (const auto& line : file_lines(path))
    v.push_back(std::strtod(line.c_str() + line.find(' '), nullptr));
  return v;
}

// The probe's test accuracy, in percent, from a run's output.
double probe_accuracy(const std::string& output) {
  const auto at = output.find("test accuracy ");
  if (at == std::string::npos) return -1;
  return std::strtod(output.c_str() + at + 14, nullptr);
}

}  // namespace

class Simclr : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = work() / info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    data_ = "--data " + write_small_data_set(dir_ / "data").string() + " ";
  }
  // The initial weights of a model for `loss`, written by a run of no steps.
  std::string init(const std::string& loss) {
    const auto path = dir_ / ("init-" + loss + ".safetensors");
    auto o =
        run_simclr(data_ + "--epochs 0 --no-probe --loss " + loss + " --save " + path.string());
    EXPECT_EQ(o.status, 0) << o.output;
    return path.string();
  }
  fs::path dir_;
  std::string data_;
};

TEST_F(Simclr, SavesTheEncoderAndHeadUnderSensibleNames) {
  const auto path = dir_ / "w.safetensors";
  auto o = run_simclr(data_ + "--steps 1 --no-probe --loss siglip --save " + path.string());
  ASSERT_EQ(o.status, 0) << o.output;
  const auto f = SafetensorsFile::open(path.string());
  const std::vector<std::pair<std::string, Shape>> want{
      {"encoder.conv1.bias", Shape{32}},  {"encoder.conv1.weight", Shape{32, 1, 3, 3}},
      {"encoder.conv2.bias", Shape{64}},  {"encoder.conv2.weight", Shape{64, 32, 3, 3}},
      {"encoder.conv3.bias", Shape{128}}, {"encoder.conv3.weight", Shape{128, 64, 3, 3}},
      {"head.fc1.bias", Shape{512}},      {"head.fc1.weight", Shape{512, 1152}},
      {"head.fc2.bias", Shape{128}},      {"head.fc2.weight", Shape{128, 512}},
      {"logit_bias", Shape{1}},           {"logit_scale", Shape{1}}};
  std::vector<std::string> names;
  for (const auto& [name, shape] : want) names.push_back(name);
  EXPECT_EQ(f.names(), names);
  for (const auto& [name, shape] : want) {
    if (f.contains(name)) {
      EXPECT_EQ(f.shape(name), shape) << name;
    }
  }
  EXPECT_EQ(f.metadata().at("loss"), "siglip");
}

// The global batch's loss does not depend on how its rows are split: 1 rank and 2 ranks (each
// strategy) give the same losses step after step, from the same weights in file order.
TEST_F(Simclr, OneAndTwoRanksGiveTheSameLossesForEveryLossAndStrategy) {
  struct Case {
    std::string loss;
    std::vector<std::string> strategies;
  };
  const std::vector<Case> cases{{"ntxent", {"allgather-nograd", "gather", "allgather", "ring"}},
                                {"clip", {"allgather", "ring"}},
                                {"siglip", {"gather", "ring"}}};
  for (const auto& c : cases) {
    const std::string common =
        data_ + "--init " + init(c.loss) + " --no-shuffle --steps 4 --no-probe --loss " + c.loss +
        " --optimizer sgd --lr 0.1";  // (SGD's step, unlike Adam's, scales with the gradient)
    const auto ref_log = dir_ / (c.loss + ".np1.txt");
    auto one = run_simclr(common + " --loss-log " + ref_log.string());
    ASSERT_EQ(one.status, 0) << one.output;
    const auto ref = losses(ref_log);
    ASSERT_EQ(ref.size(), 4u) << c.loss;
    EXPECT_TRUE(std::isfinite(ref[0]) && ref[0] > 0) << c.loss;
    for (const auto& s : c.strategies) {
      const auto log = dir_ / (c.loss + "." + s + ".np2.txt");
      auto two = run_simclr(common + " --strategy " + s + " --loss-log " + log.string(), 2);
      ASSERT_EQ(two.status, 0) << two.output;
      const auto got = losses(log);
      ASSERT_EQ(got.size(), ref.size()) << c.loss << " " << s;
      for (std::size_t i = 0; i < ref.size(); ++i)
        EXPECT_NEAR(got[i], ref[i], 1e-4 * std::max(1.0, std::abs(ref[i])))
            << c.loss << " " << s << " step " << i + 1;
    }
  }
}

// Four steps in one go, and two steps, a stop, and two more from the checkpoint: the same losses
// to the last digit and the same final weights (the views are drawn from the epoch and the
// sample, so the resumed run draws the same ones).
TEST_F(Simclr, ResumeContinuesExactlyAsAnUninterruptedRun) {
  const auto w = dir_;
  const std::string common = data_ + "--loss clip --no-probe --checkpoint-every 2 ";
  auto a = run_simclr(common + "--steps 4 --loss-log " + (w / "a.txt").string() + " --save " +
                          (w / "a.safetensors").string() + " --checkpoint-dir " +
                          (w / "ckpt-a").string(),
                      2);
  ASSERT_EQ(a.status, 0) << a.output;
  auto b1 = run_simclr(common + "--steps 2 --loss-log " + (w / "b.txt").string() +
                           " --checkpoint-dir " + (w / "ckpt-b").string(),
                       2);
  ASSERT_EQ(b1.status, 0) << b1.output;
  auto b2 = run_simclr(common + "--steps 4 --resume --loss-log " + (w / "b.txt").string() +
                           " --save " + (w / "b.safetensors").string() + " --checkpoint-dir " +
                           (w / "ckpt-b").string(),
                       2);
  ASSERT_EQ(b2.status, 0) << b2.output;
  const auto la = file_lines(w / "a.txt"), lb = file_lines(w / "b.txt");
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, lb);
  EXPECT_TRUE(file_bytes(w / "a.safetensors") == file_bytes(w / "b.safetensors"))
      << "the final weights differ";
  // Resuming with another temperature than the checkpoint's is refused, and a checkpoint of
  // another loss's model (which has other scalars) too.
  auto c1 = run_simclr(data_ + "--no-probe --steps 1 --checkpoint-dir " + (w / "ckpt-c").string());
  ASSERT_EQ(c1.status, 0) << c1.output;
  expect_clean_failure(run_simclr(data_ + "--no-probe --steps 2 --temperature 0.3 --resume " +
                                  "--checkpoint-dir " + (w / "ckpt-c").string()),
                       "temperature 0.5, not 0.3");
  expect_clean_failure(run_simclr(data_ + "--loss ntxent --no-probe --steps 6 --resume " +
                                      "--checkpoint-dir " + (w / "ckpt-b").string(),
                                  2),
                       "logit_scale");
}

// The probe of the random encoder at 1 and 2 ranks: the same accuracy (but for the order of
// floating-point sums), and well above chance on the blobs; the probe after training reports too.
TEST_F(Simclr, ProbeScoresTheEncoderAlikeAtOneAndTwoRanks) {
  const std::string args = data_ + "--probe-only --probe-epochs 5";
  auto one = run_simclr(args);
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_simclr(args, 2);
  ASSERT_EQ(two.status, 0) << two.output;
  const double a1 = probe_accuracy(one.output), a2 = probe_accuracy(two.output);
  EXPECT_GT(a1, 50.0) << one.output;
  EXPECT_NEAR(a1, a2, 100.0 / 64 + 1e-9) << one.output << two.output;  // one test image at most
  EXPECT_NE(one.output.find("256 training and 64 test images"), std::string::npos) << one.output;
  auto trained = run_simclr(data_ + "--steps 2 --probe-epochs 2 --probe-examples 100", 2);
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_NE(trained.output.find("linear probe (trained encoder): test accuracy"), std::string::npos)
      << trained.output;
  EXPECT_NE(trained.output.find("100 training and 64 test images"), std::string::npos)
      << trained.output;
}

// The pooled probe reads 128 features (each channel averaged over its positions), alike at 1 and 2
// ranks, and still finds the blobs.
TEST_F(Simclr, PooledProbeAlikeAtOneAndTwoRanks) {
  const std::string args = data_ + "--probe-only --probe-epochs 5 --probe-features pooled";
  auto one = run_simclr(args);
  ASSERT_EQ(one.status, 0) << one.output;
  auto two = run_simclr(args, 2);
  ASSERT_EQ(two.status, 0) << two.output;
  const double a1 = probe_accuracy(one.output), a2 = probe_accuracy(two.output);
  EXPECT_GT(a1, 50.0) << one.output;
  EXPECT_NEAR(a1, a2, 100.0 / 64 + 1e-9) << one.output << two.output;
  expect_clean_failure(run_simclr(data_ + "--probe-only --probe-features mean"),
                       "--probe-features");
}

TEST_F(Simclr, BadFlagsAreClearErrors) {
  expect_clean_failure(run_simclr(data_ + "--loss triplet"), "--loss: triplet not in");
  expect_clean_failure(run_simclr(data_ + "--strategy broadcast", 2),
                       "--strategy: broadcast not in");
  expect_clean_failure(run_simclr(data_ + "--loss clip --temperature 0.1"),
                       "--temperature is NT-Xent's");
  expect_clean_failure(run_simclr(data_ + "--temperature 0"), "--temperature must be positive");
  expect_clean_failure(distop::test::run_example(DISTOP_MPIEXEC, DISTOP_SIMCLR, 2,
                                                 data_ + "--quiet --batch-size 33", 120),
                       "2 ranks do not divide it");
  expect_clean_failure(run_simclr(data_ + "--strategy gather --root 2", 2),
                       "--root must be a rank in [0, 2)");
  expect_clean_failure(run_simclr(data_ + "--crop-scale 0"), "crop scale range");
  expect_clean_failure(run_simclr(data_ + "--replicas 1", 2), "--replicas must be the rank count");
  expect_clean_failure(run_simclr(data_ + "--resume"), "--resume");
}

// A batch too large for the host's memory is an error naming --batch-size and the bytes, on every
// rank alike (status 1 as for the other errors, no abort), before the model or a view is
// allocated. A step holds at most the data set (256 images: two views of 128 a rank), whatever
// --batch-size says, so the test sets the memory the check holds the host's ranks against
// (DISTOP_HOST_MEMORY_BYTES, 100 MB); with 1 GB the same flags train.
TEST_F(Simclr, ABatchTooLargeForTheMemoryIsAnErrorNamingTheFlag) {
  const std::string flags = data_ + "--quiet --steps 1 --batch-size 100000000";
  const auto o = distop::test::run_example(
      std::string("env DISTOP_HOST_MEMORY_BYTES=100000000 ") + DISTOP_MPIEXEC, DISTOP_SIMCLR, 2,
      flags, 300);
  expect_clean_failure(o, "--batch-size 100000000 needs ");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("for the activations of 256 examples"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("more than its 100000000 bytes of memory (DISTOP_HOST_MEMORY_BYTES)"),
            std::string::npos)
      << o.output;
  const auto fits = distop::test::run_example(
      std::string("env DISTOP_HOST_MEMORY_BYTES=1000000000 ") + DISTOP_MPIEXEC, DISTOP_SIMCLR, 2,
      flags, 300);
  EXPECT_EQ(fits.status, 0) << fits.output;
}

// The loop is train::fit's: --zero, --profile and --trace work as in the other examples.
TEST_F(Simclr, RunsThroughTheTrainingDriver) {
  const auto trace = dir_ / "trace.json";
  auto z =
      run_simclr(data_ + "--no-probe --steps 2 --zero 1 --profile --trace " + trace.string(), 2);
  ASSERT_EQ(z.status, 0) << z.output;
  EXPECT_TRUE(std::filesystem::exists(trace)) << z.output;
  // The loss's own movers (the default strategy's AllGather and its adjoint, the partial sums'
  // AllSumReduce) are on the timeline as operators, as distop::apply's are.
  const std::string events = file_bytes(trace);
  for (const char* event :
       {R"({"name":"AllGather","cat":"op")", R"({"name":"AllGather.adjoint","cat":"adjoint")",
        R"({"name":"AllSumReduce","cat":"op")"})
    EXPECT_NE(events.find(event), std::string::npos) << event;
}
