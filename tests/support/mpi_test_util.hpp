#pragma once
// Helpers shared by the MPI tests.

#include <mpi.h>

#include "distop/core/error.hpp"

namespace distop::test {

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

using ::distop::world_rank;

}  // namespace distop::test

// Skips the test (on every rank alike) unless at least n ranks run.
#define DISTOP_REQUIRE_RANKS(n)                                                    \
  do {                                                                             \
    if (::distop::test::world_size() < (n))                                        \
      GTEST_SKIP() << "needs " << (n) << " ranks, running " << ::distop::test::world_size(); \
  } while (0)
