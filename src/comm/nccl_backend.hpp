#pragma once
// The NCCL backend on device buffers, over the ranks of an MPI communicator (internal; NCCL builds
// only, defined in collectives_nccl.cpp).
//
// Every operation is enqueued on the NCCL stream of the communicator after an event recorded on
// the producer stream (Kokkos' default execution space instance), so it sees the kernels that
// wrote its buffers without any fence; and its completion is an event: the blocking forms make
// the producer stream wait on it before returning (no host wait), the nonblocking ones hand it to
// the Request, whose wait() does the same. NCCL's asynchronous errors (a peer that failed) are
// checked at every call and wait; on one the communicator is aborted and distop::Error thrown.
//
// The NCCL communicator of an MPI communicator is made on first use (collective over it: its
// unique id travels by MPI_Bcast) and cached on the MPI communicator as an attribute, destroyed
// with it. Operations on one communicator run in the order they are posted, on every rank alike.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "distop/comm/collectives.hpp"

namespace distop::comm::nccl {

template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm);
template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm);
template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);
template <class T>
Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm);
template <class T>
Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm);
template <class T>
Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);

// One point-to-point message of a batch (Exchange): `count` elements of T at `buffer`.
struct Message {
  void* buffer = nullptr;
  std::int64_t count = 0;
  int peer = 0;
  bool send = false;
};
// Posts every message in one ncclGroupStart/ncclGroupEnd (so a batch in which ranks send to each
// other cannot deadlock) and makes the producer stream wait for their completion.
template <class T>
void exchange(const std::vector<Message>& messages, MPI_Comm comm);

// MPI_Ialltoallv's and (in place) MPI_Iallgatherv's movement (comm::ialltoallv, comm::iallgatherv):
// ncclSend and ncclRecv in one group on the communicator's NCCL stream, after the work enqueued on
// the producer stream; the request holds the event recorded after the group.
template <class T>
Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                   const int* recv_counts, const int* recv_displs, MPI_Comm comm);
template <class T>
Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm);

// A pending operation's event (a cudaEvent_t recorded after it on the NCCL stream; null: none).
struct Pending {
  void* event = nullptr;
};
// Completes the operation for the producer stream: the work enqueued there from now on runs after
// it (cudaStreamWaitEvent; the host does not wait), and releases the event. Checks NCCL for
// asynchronous errors: on one the communicator is aborted and distop::Error thrown.
void wait(Pending& pending, MPI_Comm comm, const char* op);

}  // namespace distop::comm::nccl
