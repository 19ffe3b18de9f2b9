// The MPI test harness (tests/support/test_main.cpp) agrees on each test's result when the test
// ends: a test that fails on one rank fails on every rank, rank 0 naming the rank; and a test
// whose assertion returns early on one rank before a collective ends with the hang watchdog's
// report of a waiting rank instead of waiting until CTest's timeout.
#include <gtest/gtest.h>

#include <string>

#include "run_example.hpp"

using distop::test::run_example;

namespace {
distop::test::Outcome run_faults(const std::string& filter, const std::string& env = "") {
  return run_example(env + DISTOP_MPIEXEC, DISTOP_HARNESS_FAULTS, 2,
                     "--gtest_filter=HarnessFaults." + filter, 60);
}
}  // namespace

TEST(Harness, ATestThatFailsOnOneRankFailsOnEveryRank) {
  const auto o = run_faults("FailsOnRankOne:HarnessFaults.PassesEverywhere");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.status, 124) << "hung:\n" << o.output;
  // Rank 0, where the test passed, names rank 1 and fails the test too.
  EXPECT_NE(o.output.find("[rank 0] HarnessFaults.FailsOnRankOne failed on rank 1"),
            std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("[  FAILED  ] HarnessFaults.FailsOnRankOne"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("[       OK ] HarnessFaults.PassesEverywhere"), std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("[  FAILED  ] HarnessFaults.PassesEverywhere"), std::string::npos)
      << o.output;
}

TEST(Harness, AnEarlyReturnBeforeACollectiveEndsInTheWatchdogsReport) {
  const auto o = run_faults("ReturnsEarlyBeforeACollective", "env DISTOP_WATCHDOG_SECONDS=2 ");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.status, 124) << "hung:\n" << o.output;
  // Whichever rank's watchdog fires first reports and aborts the job: rank 0 in the test's
  // barrier, or rank 1 in the harness's agreement on the result.
  EXPECT_NE(o.output.find("distop watchdog: rank "), std::string::npos) << o.output;
  EXPECT_TRUE(o.output.find("in MPI_Barrier") != std::string::npos ||
              o.output.find("in the test harness's agreement") != std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("during HarnessFaults.ReturnsEarlyBeforeACollective"), std::string::npos)
      << o.output;
  // The ranks share a node: the report names the other rank, waiting in another operation.
  EXPECT_NE(o.output.find("Waiting in another operation: rank "), std::string::npos) << o.output;
}

TEST(Harness, TheWatchdogsReportNamesTheOperatorItWaitsIn) {
  const auto o = run_faults("SkipsABroadcastsAdjoint", "env DISTOP_WATCHDOG_SECONDS=2 ");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.status, 124) << "hung:\n" << o.output;
  // Rank 0 waits in the broadcast's adjoint (a reduction onto it), which the report names with
  // its direction and its spaces: the source [1, 1] partition of rank 0, the [2, 1] of both.
  EXPECT_NE(o.output.find("distop watchdog: rank 0"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("in Broadcast adjoint (domain [4, 120] on partition [1, 1]; range "
                          "[4, 120] on partition [2, 1])"),
            std::string::npos)
      << o.output;
}
