#pragma once
// The MPI check macro, which every MPI call distop makes goes through: on communicators set to
// return errors (Environment sets MPI_COMM_WORLD's, comm::Comm its duplicates'), a failed call
// becomes a distop::Error instead of an abort. Calls whose failure is deliberately tolerated (in a
// destructor, a noexcept path, a query whose failure has a safe answer) stay unchecked with a
// comment saying why.

#include <mpi.h>

#include <string>

#include "distop/core/error.hpp"

namespace distop {

// The message of an MPI error code.
std::string mpi_error_string(int code);

}  // namespace distop

// Calls an MPI function and throws distop::Error(op, ...) with MPI's message when it fails.
#define DISTOP_MPI_CHECK(call, op)                                                              \
  do {                                                                                          \
    const int distop_mpi_rc_ = (call);                                                          \
    if (distop_mpi_rc_ != MPI_SUCCESS)                                                          \
      throw ::distop::Error(                                                                    \
          (op), std::string(#call) + " failed: " + ::distop::mpi_error_string(distop_mpi_rc_)); \
  } while (0)
