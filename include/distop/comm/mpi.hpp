#pragma once
// The MPI backend's building blocks: the check macro (DISTOP_MPI_CHECK, core/mpi_check.hpp),
// datatype traits and an owning communicator.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "distop/core/mpi_check.hpp"

namespace distop::comm {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else static_assert(sizeof(T) == 0, "no MPI datatype for this type");
}

// An owning communicator: a duplicate of the one it is made from (so distop's messages never meet
// the program's), set to return errors, freed on destruction. Move-only. A null Comm stands for
// "this rank takes no part".
class Comm {
 public:
  Comm() = default;
  // Duplicates `comm` (collective over it).
  static Comm duplicate(MPI_Comm comm);
  // Takes ownership of an already created communicator (MPI_COMM_NULL gives a null Comm).
  static Comm adopt(MPI_Comm comm);
  ~Comm();
  Comm(Comm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  MPI_Comm get() const noexcept { return comm_; }
  bool null() const noexcept { return comm_ == MPI_COMM_NULL; }
  int rank() const;
  int size() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace distop::comm
