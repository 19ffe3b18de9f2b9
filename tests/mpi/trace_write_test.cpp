// A trace that cannot be written (a file system that refuses the file, a full disk) is the same
// distop::Error on every rank naming the OS's reason, and leaves no partial file: the trace is
// written to a temporary file beside its path and renamed over it only once complete.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"
#include "mpi_test_util.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using distop::test::error_of;
using distop::test::world_rank;

namespace {

// Rank 0's string on every rank.
std::string from_rank_0(std::string s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(static_cast<std::size_t>(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

// Records `events` events on this rank, then writes the trace to `path`.
void trace_and_write(const std::string& path, int events) {
  distop::trace::start(MPI_COMM_WORLD);
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < events; ++i)
    distop::trace::record("compute", "event " + std::to_string(i), t, t);
  try {
    distop::trace::stop_and_write(path, MPI_COMM_WORLD);
  } catch (...) {
    distop::timers::enable(false);  // trace::start turned them on
    throw;
  }
  distop::timers::enable(false);
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// /proc refuses new files: every rank raises the Error with the OS's reason for it.
TEST(TraceWrite, APathThatCannotBeCreatedIsAnErrorOnEveryRankWithTheReason) {
  const std::string path = "/proc/distop_trace_write_test.json";
  // What the OS says to a file made there.
  const int fd = ::open((path + ".probe").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
  const int reason = errno;
  ASSERT_LT(fd, 0) << "a file could be made in /proc";
  const std::string message = error_of([&] { trace_and_write(path, 3); });
  EXPECT_NE(message.find("cannot write the trace " + path), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(reason)), std::string::npos) << message;
  if (world_rank() != 0) {
    EXPECT_NE(message.find("on rank 0"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(path));
}

// A write that fails part-way (here the file-size limit, EFBIG, as a full disk's ENOSPC would):
// the Error names the reason, the old trace is left as it was, and no partial file remains.
TEST(TraceWrite, AWriteThatFailsPartWayLeavesNoPartialFile) {
  std::unique_ptr<distop::test::TempDir> dir;
  if (world_rank() == 0) dir = std::make_unique<distop::test::TempDir>("distop_trace_write");
  const fs::path path = from_rank_0(dir ? dir->file("trace.json") : std::string());
  if (world_rank() == 0) std::ofstream(path) << "the previous trace\n";

  // On rank 0, which writes the file: files of at most 4 KiB, and SIGXFSZ ignored so that a write
  // beyond the limit fails with EFBIG instead of ending the process.
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  struct sigaction ignore = {}, previous = {};
  ignore.sa_handler = SIG_IGN;
  if (world_rank() == 0) {
    ::sigaction(SIGXFSZ, &ignore, &previous);
    rlimit small = old;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0) << std::strerror(errno);
  }
  const std::string message = error_of([&] { trace_and_write(path.string(), 1000); });
  if (world_rank() == 0) {
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::sigaction(SIGXFSZ, &previous, nullptr);
  }
  EXPECT_NE(message.find("cannot write the trace " + path.string() + ": " + std::strerror(EFBIG)),
            std::string::npos)
      << message;
  if (world_rank() == 0) {
    EXPECT_EQ(text_of(path), "the previous trace\n");
    EXPECT_EQ(entries(path.parent_path()), std::vector<std::string>{"trace.json"});
    // And without the limit the same trace is written whole.
    trace_and_write(path.string(), 1000);
    const std::string trace = text_of(path);
    EXPECT_EQ(trace.rfind("]}\n"), trace.size() - 3);
    EXPECT_NE(trace.find("\"event 999\""), std::string::npos);
    EXPECT_EQ(entries(path.parent_path()), std::vector<std::string>{"trace.json"});
  } else {
    trace_and_write(path.string(), 1000);
  }
}
