// The one main of distop's test binaries, serial and MPI alike. Every rank runs every test; a
// failure on any rank fails the test binary on every rank. Rank 0 prints the usual summary; every
// rank prints its own failures, prefixed with its rank.
//
// Each test's result is agreed when the test ends (TestAgreement: one all-reduce on a
// communicator of the harness's own): a test that failed on some ranks fails on every rank, and
// rank 0 names the ranks it failed on. What the harness can and cannot guarantee: a rank whose
// assertion returned early, skipping a collective that the other ranks then wait in, cannot be
// brought back to that collective. The ranks then wait in two different operations (the early
// rank in the agreement, on its own communicator, so it never matches the test's collective), and
// the hang watchdog (distop/comm/watchdog.hpp) ends the job: every waiting rank reports its
// operation and the test ("during <suite>.<test>") and the job aborts after the watchdog's limit,
// which the harness sets to 100 s (below CTest's default 120 s) unless DISTOP_WATCHDOG_SECONDS is
// set. The test binary then fails with those reports rather than at CTest's timeout without one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "distop/comm/watchdog.hpp"
#include "distop/core/environment.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

// Agrees on each test's result across the ranks when it ends. Appended after the result printer,
// it sees OnTestEnd first (GoogleTest calls the end events in reverse order), while the test is
// still current: a failure it adds counts against the test, and the printer reports it.
class TestAgreement : public ::testing::EmptyTestEventListener {
 public:
  TestAgreement(int rank, int size, MPI_Comm comm) : rank_(rank), size_(size), comm_(comm) {}
  void OnTestStart(const ::testing::TestInfo& info) override {
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    distop::comm::set_watchdog_context(name_.c_str());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const int mine = info.result()->Failed() ? 1 : 0;
    std::vector<int> failed(static_cast<std::size_t>(size_), 0);
    {
      distop::comm::WatchedWait watch("the test harness's agreement on a test's result", comm_);
      MPI_Allgather(&mine, 1, MPI_INT, failed.data(), 1, MPI_INT, comm_);
    }
    distop::comm::set_watchdog_context(nullptr);
    std::string ranks;
    for (int r = 0; r < size_; ++r)
      if (failed[static_cast<std::size_t>(r)])
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (ranks.empty()) return;
    if (rank_ == 0)
      std::fprintf(stderr, "[rank 0] %s failed on rank%s %s\n", name_.c_str(),
                   ranks.find(',') == std::string::npos ? "" : "s", ranks.c_str());
    if (!mine) ADD_FAILURE() << "this test failed on rank(s) " << ranks;
  }

 private:
  int rank_, size_;
  MPI_Comm comm_;
  std::string name_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  distop::Environment env(argc, argv);
  if (std::getenv("DISTOP_WATCHDOG_SECONDS") == nullptr) distop::comm::set_watchdog_seconds(100);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm harness = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &harness);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new TestAgreement(rank, size, harness));
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_free(&harness);
  if (rank == 0 && failed) std::fprintf(stderr, "distop tests: a test failed on some rank\n");
  return failed;
}
