// Ends the way a program's main does after an error, for report_error_driver.cpp:
//   report_error_program all   every rank raises the same error
//   report_error_program late  every rank raises it, rank 0 a second after the others
//   report_error_program one   rank 1 alone raises one; the others go on to a collective
#include <mpi.h>
#include <unistd.h>

#include <cstring>

#include "distop/core/environment.hpp"
#include "distop/core/error.hpp"

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  const char* mode = argc > 1 ? argv[1] : "";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    if (std::strcmp(mode, "all") == 0 || std::strcmp(mode, "late") == 0) {
      if (std::strcmp(mode, "late") == 0 && rank == 0) sleep(1);
      throw distop::Error("check", "bad input seen by every rank");
    }
    if (std::strcmp(mode, "one") == 0) {
      if (rank == 1) throw distop::Error("check", "bad input seen by one rank");
      MPI_Barrier(MPI_COMM_WORLD);  // the next collective, which rank 1 never reaches
      return 0;
    }
    return 3;  // unknown mode
  } catch (const std::exception& e) {
    return env.report_error(e, "report_error_program", 1, /*patience_s=*/5);
  }
}
