// Tests that fail on purpose, run by harness_test under mpiexec -n 2 to check what the MPI test
// harness (tests/support/test_main.cpp) makes of them. Not a test of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/ops/broadcast.hpp"

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

// Rank 1 skips the adjoint of a broadcast that rank 0 then waits in. Rank 1 first waits 1.5 s, so
// that rank 0's watchdog, which names the operator, fires before rank 1's in the harness's
// agreement on the result.
TEST(HarnessFaults, SkipsABroadcastsAdjoint) {
  using namespace distop;
  const TensorSpace src(Shape{4, 120}, Partition::world(Shape{1, 1}, {0}));
  const Broadcast<double> b(src, Partition::world(Shape{2, 1}, {0, 1}));
  const DistTensor<double> dy(b.range());
  if (rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    GTEST_SKIP() << "rank 1 skips the adjoint here on purpose";
  }
  b.apply_adjoint(dy);
}
