// Tests that fail on purpose, run by harness_test under mpiexec -n 2 to check what the MPI test
// harness (tests/support/test_main.cpp) makes of them. Not a test of its own.
#include <gtest/gtest.h>
#include <mpi.h>

namespace {
int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

// Fails on rank 1 only.
TEST(HarnessFaults, FailsOnRankOne) { EXPECT_NE(rank(), 1) << "rank 1 fails here on purpose"; }

// Passes everywhere: the next test must start afresh after the failure above.
TEST(HarnessFaults, PassesEverywhere) { EXPECT_GE(rank(), 0); }

// Rank 1's assertion returns before the barrier that rank 0 then waits in.
TEST(HarnessFaults, ReturnsEarlyBeforeACollective) {
  ASSERT_NE(rank(), 1) << "rank 1 returns early here on purpose";
  MPI_Barrier(MPI_COMM_WORLD);
}
