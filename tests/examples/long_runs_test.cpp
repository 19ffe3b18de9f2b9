// Long runs as the MLP example meets them on a shared cluster: checkpoints checked against their
// CRC-32s, one run per checkpoint directory, temporary files of killed runs cleaned up, output
// paths checked before training, and an epoch's metrics whole across a mid-epoch resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distop/io/run_directory.hpp"
#include "distop/io/safetensors.hpp"
#include "run_example.hpp"
#include "small_idx_dataset.hpp"

namespace fs = std::filesystem;
using distop::test::expect_clean_failure;
using distop::test::file_lines;
using distop::test::Outcome;

namespace {

fs::path work() { return fs::path(DISTOP_MLP_WORK_DIR) / "long_runs"; }

class LongRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = work() / info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    data_ = distop::test::write_small_idx_dataset(work() / "data");
  }
  // The MLP at `ranks` ranks, quiet, with --hidden 32, --batch-size 32 and the small data set
  // unless `args` gives them.
  Outcome run(const std::string& args, int ranks = 2) {
    std::string all = "--quiet ";
    if (args.find("--hidden ") == std::string::npos) all += "--hidden 32 ";
    if (args.find("--batch-size ") == std::string::npos) all += "--batch-size 32 ";
    if (args.find("--data ") == std::string::npos) all += "--data " + data_.string() + " ";
    return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, ranks, all + args, 120);
  }
  std::string ckpt() const { return (dir_ / "ckpt").string(); }
  // Stops a run with `signo`, sent to mpiexec or to each rank, and resumes it.
  void stop_and_resume(int signo, const std::string& signame, bool to_ranks);
  fs::path dir_, data_;
};

// Inverts the last `n` bytes of a file: the end of the last tensor of a safetensors file.
void flip_last_bytes(const fs::path& path, int n) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  std::vector<char> bytes(static_cast<std::size_t>(n));
  f.seekg(-n, std::ios::end);
  f.read(bytes.data(), n);
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(-n, std::ios::end);
  f.write(bytes.data(), n);
}

// A run started in the background: mpiexec's process id, its output in a file.
struct Background {
  pid_t pid = -1;
  fs::path output;
};

Background start(const std::string& args, const fs::path& output, int ranks,
                 const std::string& env = "") {
  Background b;
  b.output = output;
  const std::string cmd = "exec env " + (env.empty() ? std::string("A=1") : env) + " " +
                          DISTOP_MPIEXEC + " -n " + std::to_string(ranks) + " " + DISTOP_MLP + " " +
                          args + " > " + output.string() + " 2>&1";
  b.pid = ::fork();
  if (b.pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return b;
}

// Waits for a background run to end, for at most `limit_s` seconds (then kills it: -1).
int finish(const Background& b, double limit_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (::waitpid(b.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(b.pid, SIGKILL);
      ::waitpid(b.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits until `path` has at least `lines` lines (false after 60 s).
bool wait_for_lines(const fs::path& path, std::size_t lines) {
  for (int i = 0; i < 6000; ++i) {
    if (file_lines(path).size() >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The process ids of the ranks that mpiexec `root` started, by rank (MPICH's PMI_RANK).
std::map<int, pid_t> rank_pids(pid_t root) {
  std::map<pid_t, pid_t> parent;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    parent[static_cast<pid_t>(std::stol(name))] = ppid;
  }
  std::map<int, pid_t> ranks;
  for (const auto& [pid, ppid] : parent) {
    pid_t up = ppid;
    for (int depth = 0; depth < 4 && up > 1 && up != root; ++depth)
      up = parent.count(up) ? parent[up] : 0;
    if (up != root) continue;
    const std::string all = read_all("/proc/" + std::to_string(pid) + "/environ");
    const auto at = all.find(std::string("PMI_RANK=", 9));
    if (at == std::string::npos || (at > 0 && all[at - 1] != '\0')) continue;
    ranks[std::stoi(all.substr(at + 9))] = pid;
  }
  return ranks;
}

}  // namespace

// Flipped bytes in a checkpoint's data section used to load silently and training went on from
// garbage; now --resume fails on every rank, naming the tensor.
TEST_F(LongRuns, ACorruptCheckpointIsAnErrorNamingTheTensor) {
  auto a = run("--steps 3 --checkpoint-dir " + ckpt());
  ASSERT_EQ(a.status, 0) << a.output;
  flip_last_bytes(fs::path(ckpt()) / "checkpoint.safetensors", 16);
  expect_clean_failure(run("--steps 6 --resume --checkpoint-dir " + ckpt()), "is corrupt");
  // The same for a --save file used as --init.
  const auto w = (dir_ / "w.safetensors").string();
  ASSERT_EQ(run("--steps 1 --save " + w).status, 0);
  flip_last_bytes(w, 4);
  expect_clean_failure(run("--steps 1 --init " + w), "is corrupt");
}

// A second run on a directory in use is an error, not two runs overwriting each other's files.
TEST_F(LongRuns, ASecondRunOnACheckpointDirectoryInUseIsAnError) {
  fs::create_directories(ckpt());
  {
    const auto held = distop::io::DirectoryLock::acquire(ckpt(), "test");
    expect_clean_failure(run("--steps 2 --checkpoint-dir " + ckpt()), "is in use by another run");
    EXPECT_FALSE(fs::exists(fs::path(ckpt()) / "checkpoint.safetensors"));
  }
  // Released (as when the first run ends or dies): the next run goes ahead.
  auto b = run("--steps 2 --checkpoint-dir " + ckpt());
  EXPECT_EQ(b.status, 0) << b.output;
}

// A run killed while writing leaves "<file>.tmp.<pid>" behind, up to the model's size; the next
// run on the directory removes them (and nothing else).
TEST_F(LongRuns, TemporaryFilesOfAKilledRunAreRemoved) {
  fs::create_directories(ckpt());
  const fs::path c(ckpt());
  for (const char* name : {"checkpoint.safetensors.tmp.4242", "metrics.csv.tmp.17"})
    std::ofstream(c / name) << "half a file";
  std::ofstream(c / "notes.tmp.txt") << "a user's file";
  auto r = run("--steps 2 --checkpoint-dir " + ckpt());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(c / "checkpoint.safetensors.tmp.4242"));
  EXPECT_FALSE(fs::exists(c / "metrics.csv.tmp.17"));
  EXPECT_TRUE(fs::exists(c / "notes.tmp.txt"));
  EXPECT_TRUE(fs::exists(c / "checkpoint.safetensors"));
}

// Output paths that cannot be written fail before the first step, not after the whole run.
TEST_F(LongRuns, UnwritableOutputsFailBeforeTraining) {
  const auto log = (dir_ / "loss.txt").string();
  auto save_dir = run("--steps 2 --save " + dir_.string() + " --checkpoint-dir " + ckpt());
  expect_clean_failure(save_dir, "it is a directory");
  EXPECT_FALSE(fs::exists(fs::path(ckpt()) / "checkpoint.safetensors"));
  expect_clean_failure(run("--steps 2 --save " + (dir_ / "no" / "w.safetensors").string()),
                       "is not a writable directory");
  expect_clean_failure(run("--steps 2 --loss-log " + dir_.string()), "Is a directory");
  expect_clean_failure(run("--steps 2 --metrics " + (dir_ / "no" / "m.csv").string()),
                       "cannot write");
  std::ofstream(dir_ / "file") << "x";
  expect_clean_failure(run("--steps 2 --checkpoint-dir " + (dir_ / "file").string()),
                       "cannot write --checkpoint-dir");
}

// An epoch's row in metrics.csv covers all of its steps also when the run stopped and resumed in
// the middle of it: the same train loss and accuracy as an uninterrupted run.
TEST_F(LongRuns, AMidEpochResumeKeepsTheEpochsMetricsWhole) {
  const std::string common = "--epochs 2 --checkpoint-every 3 --no-shuffle ";
  auto a = run(common + "--checkpoint-dir " + (dir_ / "a").string());
  ASSERT_EQ(a.status, 0) << a.output;
  auto b1 = run(common + "--steps 5 --checkpoint-dir " + ckpt());
  ASSERT_EQ(b1.status, 0) << b1.output;
  auto b2 = run(common + "--resume --checkpoint-dir " + ckpt());
  ASSERT_EQ(b2.status, 0) << b2.output;
  const auto ra = file_lines(dir_ / "a" / "metrics.csv");
  const auto rb = file_lines(fs::path(ckpt()) / "metrics.csv");
  ASSERT_EQ(ra.size(), 3u);
  ASSERT_EQ(rb.size(), 3u);
  // Every column but the seconds (the last).
  for (std::size_t i = 0; i < ra.size(); ++i)
    EXPECT_EQ(ra[i].substr(0, ra[i].rfind(',')), rb[i].substr(0, rb[i].rfind(','))) << i;
}

// SIGTERM to mpiexec (as a batch system's time limit sends it; MPICH's mpiexec passes it on to
// every rank): the ranks agree on a step, checkpoint, and exit with 128 + 15, rank 0 saying so.
// Resumed, the run ends with the losses of a run that was never stopped.
// mpiexec's own exit status after it passed a signal on is racy (MPICH 4.0 hydra: 0 or the ranks'
// 143), so the status is checked where the ranks get the signal themselves, as a batch system
// that signals every task (Slurm) or a terminal's Ctrl-C to the process group does: SIGINT, 130.
TEST_F(LongRuns, SigtermCheckpointsAndTheResumedRunMatchesAnUninterruptedOne) {
  stop_and_resume(SIGTERM, "SIGTERM", false);
}
TEST_F(LongRuns, SigintCheckpointsAndTheResumedRunMatchesAnUninterruptedOne) {
  stop_and_resume(SIGINT, "SIGINT", true);
}

void LongRuns::stop_and_resume(int signo, const std::string& signame, bool to_ranks) {
  const std::string common =
      "--quiet --hidden 256 --batch-size 8 --data " + data_.string() + " --epochs 6 ";
  auto a = distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, 2,
                                     common + "--loss-log " + (dir_ / "a.txt").string(), 120);
  ASSERT_EQ(a.status, 0) << a.output;
  const auto la = file_lines(dir_ / "a.txt");
  ASSERT_EQ(la.size(), 192u);  // 32 steps of 8 per epoch: long enough for the signal to arrive

  const auto log = dir_ / "b.txt";
  const auto bg = start(common + "--checkpoint-dir " + ckpt() + " --loss-log " + log.string(),
                        dir_ / "b1.out", 2);
  ASSERT_TRUE(wait_for_lines(log, 5)) << read_all(bg.output);
  if (to_ranks) {
    const auto ranks = rank_pids(bg.pid);
    ASSERT_EQ(ranks.size(), 2u) << "cannot find the ranks under mpiexec " << bg.pid;
    for (const auto& [rank, pid] : ranks) ::kill(pid, signo);
  } else {
    ::kill(bg.pid, signo);
  }
  const int status = finish(bg, 60);
  const std::string out = read_all(bg.output);
  if (file_lines(log).size() == la.size() && out.find("stopped by signal") == std::string::npos)
    GTEST_SKIP() << "the training finished before the signal came: " << out;
  if (to_ranks) {
    EXPECT_EQ(status, 128 + signo) << out;
  } else {
    EXPECT_TRUE(status == 128 + signo || status == 0) << status << "\n" << out;
  }
  EXPECT_NE(
      out.find("mlp: stopped by signal " + std::to_string(signo) + " (" + signame + ") after step"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("continue with --resume"), std::string::npos) << out;
  const auto stopped_at = file_lines(log).size();
  EXPECT_LT(stopped_at, la.size());

  auto b2 = distop::test::run_example(
      DISTOP_MPIEXEC, DISTOP_MLP, 2,
      common + "--resume --checkpoint-dir " + ckpt() + " --loss-log " + log.string(), 120);
  ASSERT_EQ(b2.status, 0) << b2.output;
  EXPECT_EQ(file_lines(log), la);
}

// A rank stopped (SIGSTOP) leaves the other waiting in a collective: with
// DISTOP_WATCHDOG_SECONDS=2 it reports the wait, names the stopped rank, and aborts the job,
// instead of waiting for ever.
TEST_F(LongRuns, TheWatchdogEndsAJobWhoseRankStopped) {
  const auto log = dir_ / "loss.txt";
  const auto bg = start("--quiet --hidden 256 --batch-size 8 --epochs 50 --data " + data_.string() +
                            " --loss-log " + log.string(),
                        dir_ / "out.txt", 2, "DISTOP_WATCHDOG_SECONDS=2");
  ASSERT_TRUE(wait_for_lines(log, 3)) << read_all(bg.output);
  const auto ranks = rank_pids(bg.pid);
  ASSERT_EQ(ranks.count(1), 1u) << "cannot find rank 1 under mpiexec " << bg.pid;
  ::kill(ranks.at(1), SIGSTOP);
  const int status = finish(bg, 60);  // a hang: killed after 60 s, status -1
  // The stopped rank, should it have outlived the job (its pid not yet reused by another program).
  std::error_code ec;
  if (fs::read_symlink("/proc/" + std::to_string(ranks.at(1)) + "/exe", ec) ==
      fs::canonical(DISTOP_MLP, ec))
    ::kill(ranks.at(1), SIGKILL);
  const std::string out = read_all(bg.output);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(status, -1) << "the job hung:\n" << out;
  EXPECT_NE(out.find("distop watchdog: rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("at training step"), std::string::npos) << out;
  EXPECT_NE(out.find("DISTOP_WATCHDOG_SECONDS=2"), std::string::npos) << out;
  // Both ranks share the node: rank 0's report names rank 1 as not arrived, stopped, from the
  // node's status board.
  const std::string stopped =
      "not arrived: rank 1 (pid " + std::to_string(ranks.at(1)) + ", stopped; ";
  EXPECT_NE(out.find(stopped), std::string::npos) << out;
  EXPECT_NE(out.find("Ranks on other nodes cannot be seen from here."), std::string::npos) << out;
}

// SIGTERM to a job whose rank 1 is stopped: rank 0 waits in a collective that rank 1 never joins,
// so no step boundary comes where it could act on the signal. With DISTOP_SIGNAL_GRACE_SECONDS=2
// it ends itself 2 s later with exit status 128 + 15, naming the MPI call it waits in (the MLP
// links distop::watchdog, which sees every blocking MPI call), well before the hang watchdog's
// 600 s. The signal goes to the ranks, as a batch system that signals every task (Slurm) sends it;
// the stopped rank keeps it pending, and mpiexec ends it once rank 0 has gone.
TEST_F(LongRuns, SigtermEndsARankStuckInACollectiveAfterTheGracePeriod) {
  const auto log = dir_ / "loss.txt";
  const auto bg = start("--quiet --hidden 256 --batch-size 8 --epochs 50 --data " + data_.string() +
                            " --loss-log " + log.string(),
                        dir_ / "out.txt", 2, "DISTOP_SIGNAL_GRACE_SECONDS=2");
  ASSERT_TRUE(wait_for_lines(log, 3)) << read_all(bg.output);
  const auto ranks = rank_pids(bg.pid);
  ASSERT_EQ(ranks.size(), 2u) << "cannot find the ranks under mpiexec " << bg.pid;
  ::kill(ranks.at(1), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 reaches its wait
  for (const auto& [rank, pid] : ranks) ::kill(pid, SIGTERM);
  const int status = finish(bg, 60);  // a hang: killed after 60 s, status -1
  std::error_code ec;
  if (fs::read_symlink("/proc/" + std::to_string(ranks.at(1)) + "/exe", ec) ==
      fs::canonical(DISTOP_MLP, ec))
    ::kill(ranks.at(1), SIGKILL);
  const std::string out = read_all(bg.output);
  EXPECT_NE(status, -1) << "the job ignored SIGTERM:\n" << out;
  EXPECT_EQ(status, 128 + SIGTERM) << out;
  EXPECT_NE(out.find("distop: rank 0 (pid " + std::to_string(ranks.at(0)) + "): SIGTERM came "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" s ago and no step boundary was reached since "
                     "(DISTOP_SIGNAL_GRACE_SECONDS=2); ending the process with exit status 143. "
                     "It waits in "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("at training step"), std::string::npos) << out;
  EXPECT_EQ(out.find("distop watchdog:"), std::string::npos) << out;
}

// A second SIGTERM ends a rank at once, whatever it waits in: here with the grace period off
// (DISTOP_SIGNAL_GRACE_SECONDS=0), so that nothing else would end the job before the hang
// watchdog's 600 s.
TEST_F(LongRuns, ASecondSigtermEndsAStuckRankAtOnce) {
  const auto log = dir_ / "loss.txt";
  const auto bg = start("--quiet --hidden 256 --batch-size 8 --epochs 50 --data " + data_.string() +
                            " --loss-log " + log.string(),
                        dir_ / "out.txt", 2, "DISTOP_SIGNAL_GRACE_SECONDS=0");
  ASSERT_TRUE(wait_for_lines(log, 3)) << read_all(bg.output);
  const auto ranks = rank_pids(bg.pid);
  ASSERT_EQ(ranks.size(), 2u) << "cannot find the ranks under mpiexec " << bg.pid;
  ::kill(ranks.at(1), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(ranks.at(0), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(ranks.at(0), SIGTERM);
  const int status = finish(bg, 60);
  std::error_code ec;
  if (fs::read_symlink("/proc/" + std::to_string(ranks.at(1)) + "/exe", ec) ==
      fs::canonical(DISTOP_MLP, ec))
    ::kill(ranks.at(1), SIGKILL);
  const std::string out = read_all(bg.output);
  EXPECT_NE(status, -1) << "the job ignored two SIGTERMs:\n" << out;
  EXPECT_NE(status, 0) << out;
  EXPECT_EQ(out.find("no step boundary was reached"), std::string::npos) << out;
}

// Flag errors name the program and the flag and exit with status 2; numbers are parsed strictly.
TEST_F(LongRuns, NumericFlagsAreParsedStrictly) {
  struct Case {
    const char* flags;
    const char* needle;
  };
  for (const Case& c :
       {Case{"--seed -1", "--seed: '-1' is not a non-negative integer"},
        Case{"--epochs 99999999999", "--epochs: 99999999999 is out of range"},
        Case{"--steps 18446744073709551616", "--steps: 18446744073709551616 is out"},
        Case{"--batch-size 0x10", "--batch-size: '0x10' is not an integer"},
        Case{"--lr nan", "--lr: nan is not a finite number"},
        Case{"--momentum 1e999", "--momentum: 1e999 is not a finite number"}}) {
    const auto o = run(c.flags);
    expect_clean_failure(o, std::string("mlp: error: ") + c.needle);
    EXPECT_EQ(o.status, 2) << c.flags << "\n" << o.output;
  }
}

// Ranks started with different flags (an MPMD launch gone wrong) fail at start, naming the flag,
// rather than hang (--steps) or train apart.
TEST_F(LongRuns, RanksGivenDifferentFlagsFailNamingTheFlag) {
  const std::string common = "--quiet --hidden 32 --data " + data_.string();
  const auto o = distop::test::run_example(
      DISTOP_MPIEXEC, DISTOP_MLP, 1,
      common + " --steps 2 : -n 1 " + DISTOP_MLP + " " + common + " --steps 3", 60);
  expect_clean_failure(o, "mlp: error: --steps differs between the ranks");
  EXPECT_EQ(o.status, 2) << o.output;
  // A flag only one rank can parse: the others do not wait for it.
  const auto p = distop::test::run_example(
      DISTOP_MPIEXEC, DISTOP_MLP, 1,
      common + " --steps 2 : -n 1 " + DISTOP_MLP + " " + common + " --steps x", 60);
  expect_clean_failure(p, "--steps");
  EXPECT_EQ(p.status, 2) << p.output;
}

// Inputs that cannot train: a hidden-layer list with an empty entry, a model too large for the
// memory (an error naming the flag and the bytes, before anything is allocated), a data set
// without training examples, initial weights that are not finite.
TEST_F(LongRuns, InputsThatCannotTrainAreErrors) {
  expect_clean_failure(run("--steps 1 --hidden 64,,32"), "--hidden has an empty entry");
  expect_clean_failure(run("--steps 1 --hidden 64,"), "--hidden has an empty entry");
  expect_clean_failure(run("--steps 1 --hidden 100000000000"), "--hidden 100000000000 needs ");
  const auto empty = distop::test::write_small_idx_dataset(dir_ / "empty", 0);
  expect_clean_failure(run("--steps 1 --data " + empty.string()), "has no examples");

  const auto w = (dir_ / "w.safetensors").string();
  ASSERT_EQ(run("--epochs 0 --save " + w).status, 0);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const auto f = distop::io::SafetensorsFile::open(w);
    std::vector<std::vector<float>> values;
    std::vector<distop::io::TensorEntry> entries;
    const auto names = f.names();
    values.reserve(names.size());
    for (const auto& name : names) {
      values.push_back(f.read<float>(name));
      if (name == "fc2.weight") values.back()[3] = bad;
      entries.emplace_back(name, f.shape(name), values.back().data());
    }
    const auto bad_path = (dir_ / "bad.safetensors").string();
    auto metadata = f.metadata();
    distop::io::add_checksums(entries, metadata);
    distop::io::write_safetensors(bad_path, entries, metadata);
    expect_clean_failure(
        run("--steps 1 --init " + bad_path),
        "tensor 'fc2.weight' holds " + std::string(std::isnan(bad) ? "nan" : "inf"));
  }
}

// A loss that blows up stops the run with an error naming the step; the checkpoint is the one
// before it, not weights made from a NaN. --allow-nonfinite goes on instead.
TEST_F(LongRuns, ANonFiniteLossStopsTrainingNamingTheStep) {
  const std::string flags = "--steps 6 --lr 1e30 --checkpoint-every 1 --checkpoint-dir " + ckpt();
  const auto o = run(flags);
  expect_clean_failure(o, "training stopped; the last checkpoint in " + ckpt() + " is as it was");
  const auto at = o.output.find("the loss of step ");
  ASSERT_NE(at, std::string::npos) << o.output;
  const long bad_step = std::stol(o.output.substr(at + 17));
  const auto meta =
      distop::io::SafetensorsFile::open((fs::path(ckpt()) / "checkpoint.safetensors").string())
          .metadata();
  EXPECT_LT(std::stol(meta.at("global_step")), bad_step) << o.output;
  fs::remove_all(ckpt());
  const auto going_on = run(flags + " --allow-nonfinite");
  EXPECT_EQ(going_on.status, 0) << going_on.output;
}

// A data directory that exists but cannot be read says so. Root reads every directory, so as
// root the job runs as the unprivileged user nobody (setpriv, util-linux), where that user can
// reach the program and the test's directory.
TEST_F(LongRuns, AnUnreadableDataDirectorySaysPermissionDenied) {
  const auto locked = dir_ / "locked";
  fs::create_directories(locked);
  std::string mpiexec = DISTOP_MPIEXEC;
  if (::geteuid() == 0) {
    const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    const std::string probe = as_nobody + "test -x " + std::string(DISTOP_MLP) + " -a -x " +
                              locked.string() + " > /dev/null 2>&1";
    if (std::system(probe.c_str()) != 0)
      GTEST_SKIP() << "running as root, and the user nobody cannot run the program or reach "
                   << locked << " (or setpriv is missing)";
    mpiexec = as_nobody + mpiexec;
  }
  fs::permissions(locked, fs::perms::none);
  const auto o = distop::test::run_example(
      mpiexec, DISTOP_MLP, 2,
      "--quiet --hidden 32 --batch-size 32 --steps 1 --data " + locked.string(), 120);
  fs::permissions(locked, fs::perms::owner_all);
  expect_clean_failure(o, "cannot read " + (locked / "train-images-idx3-ubyte").string());
  EXPECT_NE(o.output.find("Permission denied"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("does not exist"), std::string::npos) << o.output;
}

namespace {

// One event of a trace ("ph": "X").
struct TraceEvent {
  std::string category, name;
  int tid = 0;
  double begin = 0, end = 0;  // microseconds
};

// A trace's events by rank (pid), checked for structure: the metadata names each rank's track, the
// events have non-negative times, and the events of row 0 nest (sorted by start, longest first at
// equal starts, each one ends within every enclosing event it starts in, to 3 decimals of a
// microsecond of rounding).
std::map<int, std::vector<TraceEvent>> read_trace(const fs::path& path, int ranks) {
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::vector<TraceEvent>> events;
  std::map<int, std::string> tracks;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") tracks[pid] = e["args"]["name"].get<std::string>();
      continue;
    }
    EXPECT_EQ(e["ph"], "X") << e.dump();
    TraceEvent t{e["cat"].get<std::string>(), e["name"].get<std::string>(), e["tid"].get<int>(),
                 e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    EXPECT_GE(t.begin, 0.0) << e.dump();
    EXPECT_GE(t.end, t.begin) << e.dump();
    events[pid].push_back(std::move(t));
  }
  std::map<int, std::string> expected;
  for (int r = 0; r < ranks; ++r) expected[r] = "rank " + std::to_string(r);
  EXPECT_EQ(tracks, expected);
  for (auto& [rank, v] : events) {
    std::stable_sort(v.begin(), v.end(), [](const TraceEvent& a, const TraceEvent& b) {
      return a.begin < b.begin || (a.begin == b.begin && a.end > b.end);
    });
    std::vector<const TraceEvent*> open;  // the enclosing events of row 0
    for (const auto& e : v) {
      if (e.tid != 0) continue;
      while (!open.empty() && e.begin >= open.back()->end - 1e-3) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e.end, open.back()->end + 2e-3)
            << "rank " << rank << ": " << e.name << " overlaps its parent " << open.back()->name;
      }
      open.push_back(&e);
    }
  }
  return events;
}

// The names of the "compute" events of rank `events` within [begin, end) on row 0 that no other
// compute event there encloses (a layer's, not the functions inside it), in time order, with
// repeats in a row kept once (a layer's backward may replay several tape entries).
std::vector<std::string> outer_computations(const std::vector<TraceEvent>& events, double begin,
                                            double end) {
  std::vector<std::string> names;
  double outer_end = -1;
  for (const auto& e : events) {  // sorted by start
    if (e.tid != 0 || e.category != "compute" || e.begin < begin || e.end > end) continue;
    if (e.begin < outer_end) continue;  // inside the previous one
    outer_end = e.end;
    if (names.empty() || names.back() != e.name) names.push_back(e.name);
  }
  return names;
}

}  // namespace

// --trace writes a Chrome trace: one track per rank, the steps with their phases, the operators'
// forward and adjoint, the layers' computations and the waits, nested; --profile prints the
// per-step breakdown. With data parallelism, the buckets' reductions are on a row of their own.
TEST_F(LongRuns, TraceAndProfile) {
  const auto path = dir_ / "trace.json";
  const auto o =
      distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, 2,
                                "--hidden 32 --batch-size 32 --steps 3 --data " + data_.string() +
                                    " --trace " + path.string() + " --profile",
                                120);
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_NE(o.output.find("profile: 3 steps at 2 ranks"), std::string::npos) << o.output;
  for (const char* row : {"phases", "step", "forward", "backward", "operators, forward",
                          "operators, adjoint", ".adjoint", "waits (within the above)"})
    EXPECT_NE(o.output.find(row), std::string::npos) << row << "\n" << o.output;
  // Layer names are the trace's only: the profile's rows stay the operators' and tape entries'.
  EXPECT_EQ(o.output.find("\n    fc1 "), std::string::npos) << o.output;

  const auto events = read_trace(path, 2);
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, int> categories;
    for (const auto& e : events.at(r)) ++categories[e.category];
    EXPECT_EQ(categories["step"], 3) << r;
    EXPECT_EQ(categories["phase"], 12) << r;  // load, forward, backward, optimizer
    EXPECT_GT(categories["op"], 0) << r;
    EXPECT_GT(categories["adjoint"], 0) << r;
    EXPECT_GT(categories["compute"], 0) << r;
    EXPECT_GT(categories["wait"], 0) << r;
    EXPECT_EQ(categories["bucket"], 0) << r;  // no data parallelism
    // Each step's forward shows the model's layers in order, then the loss, and its backward the
    // same in reverse. The adjoints are operators' only.
    int forwards = 0, backwards = 0;
    const std::vector<std::string> layers{"fc1", "relu", "fc2", "cross_entropy"};
    for (const auto& phase : events.at(r)) {
      if (phase.category == "adjoint") {
        EXPECT_EQ(phase.name.find("fc"), std::string::npos) << phase.name;
        EXPECT_EQ(phase.name.find("relu"), std::string::npos) << phase.name;
      }
      if (phase.category != "phase") continue;
      const auto names = outer_computations(events.at(r), phase.begin, phase.end);
      if (phase.name == "forward") {
        ++forwards;
        EXPECT_EQ(names, layers) << r;
      } else if (phase.name == "backward") {
        ++backwards;
        EXPECT_EQ(names, std::vector<std::string>(layers.rbegin(), layers.rend())) << r;
      }
    }
    EXPECT_EQ(forwards, 3) << r;
    EXPECT_EQ(backwards, 3) << r;
  }

  // Two replicas of one rank: every bucket's reduction is an event on row 1, within the backward
  // phase (and so the step) that launched it.
  const auto replicated = dir_ / "replicated.json";
  const auto d =
      distop::test::run_example(DISTOP_MPIEXEC, DISTOP_MLP, 2,
                                "--hidden 32 --batch-size 32 --steps 2 --replicas 2 --data " +
                                    data_.string() + " --trace " + replicated.string(),
                                120);
  ASSERT_EQ(d.status, 0) << d.output;
  const auto dp = read_trace(replicated, 2);
  for (int r = 0; r < 2; ++r) {
    int buckets = 0;
    for (const auto& b : dp.at(r)) {
      if (b.category != "bucket") {
        EXPECT_EQ(b.tid, 0) << b.name;
        continue;
      }
      ++buckets;
      EXPECT_EQ(b.tid, 1) << b.name;
      EXPECT_EQ(b.name.rfind("bucket ", 0), 0u) << b.name;
      EXPECT_NE(b.name.find(" MiB, "), std::string::npos) << b.name;
      int within = 0;
      for (const auto& p : dp.at(r))
        if (p.category == "phase" && p.name == "backward" && p.begin <= b.begin + 1e-3 &&
            b.end <= p.end + 1e-3)
          ++within;
      EXPECT_EQ(within, 1) << "rank " << r << ": " << b.name << " at " << b.begin;
    }
    EXPECT_GE(buckets, 2) << r;  // one or more per step
  }
}
