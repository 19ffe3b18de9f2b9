// Environment::report_error: an error every rank raised is printed once and ends the program with
// status 1; one raised on some ranks only aborts the job with that rank's message, never a hang.
#include <gtest/gtest.h>

#include <string>

#include "run_example.hpp"

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

distop::test::Outcome run(const char* mode) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_REPORT_ERROR_PROGRAM, 3, mode, 60);
}

TEST(ReportError, AnErrorOnEveryRankIsPrintedOnceByRank0) {
  for (const char* mode : {"all", "late"}) {
    const auto o = run(mode);
    EXPECT_EQ(o.status, 1) << mode << ":\n" << o.output;
    EXPECT_EQ(count(o.output, "report_error_program: error: "), 1u) << mode << ":\n" << o.output;
    EXPECT_EQ(count(o.output, "bad input seen by every rank"), 1u) << mode << ":\n" << o.output;
    EXPECT_EQ(count(o.output, "aborting"), 0u) << mode << ":\n" << o.output;
  }
}

TEST(ReportError, AnErrorOnOneRankAbortsTheJobWithThatRanksMessage) {
  const auto o = run("one");
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.status, 124) << "the job hung:\n" << o.output;
  EXPECT_EQ(count(o.output, "report_error_program: error on rank 1: "), 1u) << o.output;
  EXPECT_EQ(count(o.output, "bad input seen by one rank"), 1u) << o.output;
  EXPECT_EQ(count(o.output, "aborting the job"), 1u) << o.output;
}

}  // namespace
