// Which waits the hang watchdog watches with and without distop::watchdog (comm/watchdog.hpp),
// built twice: watchdog_program (libdistop alone) and watchdog_program_interposed (linked with
// distop::watchdog). Rank 0 waits while rank 1 sleeps `seconds` before it joins; run with
// DISTOP_WATCHDOG_SECONDS below that:
//   watchdog_program distop-wait SECONDS  a distop collective's polling wait (allreduce_sum, with
//                                          DISTOP_YIELD_WHEN_IDLE=1): watched either way
//   watchdog_program mpi-call SECONDS     the program's own MPI_Barrier: watched only when linked
// Rank 0 first prints whether blocking MPI calls are watched, each rank at the end that its wait
// passed.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distop/comm/collectives.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/environment.hpp"

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  if (argc != 3) return 2;
  const char* mode = argv[1];
  const int seconds = std::atoi(argv[2]);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("watchdog_program: blocking MPI calls watched: %s\n",
                distop::comm::watchdog_watches_mpi_calls() ? "yes" : "no");
  std::fflush(stdout);
  if (rank == 1) sleep(static_cast<unsigned>(seconds));
  if (std::strcmp(mode, "distop-wait") == 0) {
    double x = 1;
    distop::comm::allreduce_sum<double>(&x, &x, 1, MPI_COMM_WORLD);
  } else if (std::strcmp(mode, "mpi-call") == 0) {
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    return 2;
  }
  std::printf("watchdog_program: rank %d: the wait passed\n", rank);
  return 0;
}
