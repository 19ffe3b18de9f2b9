#pragma once
// Helpers shared by the MPI tests.

#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>

#include "distop/core/error.hpp"

namespace distop::test {

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

using ::distop::world_rank;

// The message of the Error `f` throws, or "" (and a test failure) when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace distop::test

// Skips the test (on every rank alike) unless at least n ranks run.
#define DISTOP_REQUIRE_RANKS(n)                                                              \
  do {                                                                                       \
    if (::distop::test::world_size() < (n))                                                  \
      GTEST_SKIP() << "needs " << (n) << " ranks, running " << ::distop::test::world_size(); \
  } while (0)
