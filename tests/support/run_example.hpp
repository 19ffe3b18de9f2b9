#pragma once
// Running an example program under mpiexec from a test, as a user would.

#include <sys/wait.h>

#include <cstdio>
#include <string>

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

}  // namespace distop::test
