#pragma once
// Running an example program under mpiexec from a test, as a user would.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace distop::test {

struct Outcome {
  int status = -1;  // the exit status; 124: killed by the time limit (it hung)
  std::string output;
};

// Runs `exe args` at `ranks` ranks under `mpiexec` with a time limit, capturing stdout and stderr.
inline Outcome run_example(const std::string& mpiexec, const std::string& exe, int ranks,
                           const std::string& args, int timeout_s = 120) {
  std::string cmd("timeout ");
  cmd += std::to_string(timeout_s);
  cmd += " ";
  cmd += mpiexec;
  cmd += " -n ";
  cmd += std::to_string(ranks);
  cmd += " ";
  cmd += exe;
  cmd += " ";
  cmd += args;
  cmd += " 2>&1";
  Outcome o;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) o.output += buf;
  const int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

// A run that failed as bad input should make a program fail: a non-zero exit, no hang, no
// MPI_Abort, and `needle` in what it printed.
inline void expect_clean_failure(const Outcome& o, const std::string& needle) {
  EXPECT_NE(o.status, 0) << o.output;
  EXPECT_NE(o.status, 124) << "the example hung:\n" << o.output;
  EXPECT_NE(o.output.find(needle), std::string::npos) << "expected '" << needle << "' in:\n"
                                                      << o.output;
  EXPECT_EQ(o.output.find("MPI_Abort"), std::string::npos) << o.output;
}

// A text file's lines, and a file's bytes.
inline std::vector<std::string> file_lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace distop::test
