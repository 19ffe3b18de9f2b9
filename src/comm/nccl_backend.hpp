#pragma once
// NCCL collectives on device buffers, over the ranks of an MPI communicator (internal).

#include <mpi.h>

#include <cstdint>

namespace distop::comm::nccl {

// Each blocks until the result is in place (the stream is synchronised), matching MPI's blocking
// semantics. The NCCL communicator of an MPI communicator is created on first use (its unique id
// travels by MPI_Bcast) and cached on the MPI communicator as an attribute, destroyed with it.
template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm);
template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm);
template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);

}  // namespace distop::comm::nccl
