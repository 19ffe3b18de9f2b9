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

// Nonblocking collectives for the data-parallel reducer: posted on the communicator's NCCL stream
// and completed through test() or wait(); the buffers must stay untouched until then. Collectives
// on one communicator must be started in the same order on every rank.
struct Pending {
  void* event = nullptr;  // the cudaEvent_t recorded after the collective; null: none pending
};
// Every rank sends send[send_displs[q], + send_counts[q]) to rank q and receives recv_counts[q]
// entries from rank q at recv + recv_displs[q] (MPI_Ialltoallv's movement: ncclSend and ncclRecv
// in one group). Waits for the Kokkos kernels that wrote the buffers first.
template <class T>
void alltoallv_start(const T* send, const int* send_counts, const int* send_displs, T* recv,
                     const int* recv_counts, const int* recv_displs, MPI_Comm comm,
                     Pending& pending);
// In place: rank q's block buf[displs[q], + counts[q]) to every rank (MPI_Iallgatherv's movement).
template <class T>
void allgatherv_start(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                      Pending& pending);
// Whether the collective has completed (its event is then released). Polls NCCL for asynchronous
// errors as the blocking calls do: on one the communicator is aborted and distop::Error thrown.
bool test(Pending& pending, MPI_Comm comm, const char* op);
void wait(Pending& pending, MPI_Comm comm, const char* op);
// Releases a pending event without waiting (for destructors; never throws).
void release(Pending& pending) noexcept;

}  // namespace distop::comm::nccl
