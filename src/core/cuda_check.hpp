#pragma once
// The check macros of the CUDA glue (internal; CUDA builds only): every CUDA runtime and NCCL call
// goes through one, as every MPI call goes through DISTOP_MPI_CHECK (core/mpi_check.hpp). Calls
// whose failure is deliberately tolerated (a destructor's, a query that answers "no device") stay
// unchecked with a comment saying why.

#include <cuda_runtime.h>

#include <string>

#include "distop/core/error.hpp"

// Calls a function that returns a status and throws distop::Error(op, ...) with `describe`'s text
// for the status unless it returned `success`.
#define DISTOP_STATUS_CHECK(call, op, success, describe)                                    \
  do {                                                                                      \
    const auto distop_rc_ = (call);                                                         \
    if (distop_rc_ != (success))                                                            \
      throw ::distop::Error((op), std::string(#call) + " failed: " + describe(distop_rc_)); \
  } while (0)

// Calls a CUDA runtime function and throws distop::Error(op, ...) with CUDA's message when it
// fails.
#define DISTOP_CUDA_CHECK(call, op) DISTOP_STATUS_CHECK(call, op, cudaSuccess, cudaGetErrorString)
