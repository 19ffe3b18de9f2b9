#include "distop/core/mpi_check.hpp"

namespace distop {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  // Unchecked: this describes a failed call; a code MPI cannot describe gets its number.
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace distop
