// A program linked with distop::watchdog as well as distop::distop: the hang watchdog watches its
// own blocking MPI calls and distop's (each one a "wait <call>" timer). Run under mpiexec; exits
// non-zero otherwise.
#include <cstdio>
#include <cstdlib>
#include <distop/distop.hpp>

int main(int argc, char** argv) {
  setenv("DISTOP_YIELD_WHEN_IDLE", "0", 1);  // distop's blocking collectives, not its polling ones
  distop::Environment env(argc, argv);
  distop::timers::enable(true);
  MPI_Barrier(MPI_COMM_WORLD);  // the program's
  double x = 1;
  distop::comm::allreduce_sum<double>(&x, &x, 1, MPI_COMM_WORLD);  // distop's MPI_Allreduce
  const auto waits = distop::timers::snapshot();
  const bool watched = distop::comm::watchdog_watches_mpi_calls() &&
                       waits.count("wait MPI_Barrier") == 1 &&
                       waits.count("wait MPI_Allreduce") == 1;
  if (!watched) std::fprintf(stderr, "watched: blocking MPI calls are not watched\n");
  return watched ? 0 : 1;
}
