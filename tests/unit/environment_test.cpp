// Environment's options that are checked against the MPI it finds.

#include "distop/core/environment.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "distop/core/error.hpp"

namespace distop {
namespace {

// The test binary's Environment initialised MPI asking for MPI_THREAD_FUNNELED; a second one
// asking for more than MPI provided is refused before it changes anything.
TEST(EnvironmentTest, AThreadLevelMpiDoesNotProvideIsAnError) {
  int provided = 0;
  ASSERT_EQ(MPI_Query_thread(&provided), MPI_SUCCESS);
  if (provided >= MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI already provides MPI_THREAD_MULTIPLE";
  char name[] = "environment_test";
  char* args[] = {name, nullptr};
  int argc = 1;
  char** argv = args;
  try {
    Environment env(argc, argv, {.mpi_thread_level = MPI_THREAD_MULTIPLE});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI provides thread support level " + std::to_string(provided)),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("below the " + std::to_string(MPI_THREAD_MULTIPLE) + " asked for"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace distop
