#include "distop/core/error.hpp"

#include <mpi.h>

namespace distop {

namespace {
std::string prefix(const std::string& op, int rank) {
  return "[distop " + op + (rank >= 0 ? ", rank " + std::to_string(rank) : std::string()) + "] ";
}
}  // namespace

int world_rank() noexcept {
  // Unchecked (noexcept, and called while an Error is made): a failed query answers -1.
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

Error::Error(std::string op, const std::string& message)
    : std::runtime_error(prefix(op, world_rank()) + message),
      op_(std::move(op)),
      detail_(message),
      rank_(world_rank()) {}

}  // namespace distop
