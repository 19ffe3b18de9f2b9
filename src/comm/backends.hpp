#pragma once
// The backend classes behind the call surface (internal; see distop/comm/backend.hpp). Each is a
// set of static operations with one signature per operation, as in LLNL Aluminum; the call
// surface (collectives.cpp, exchange.cpp) picks one per call by where the buffers live.

#include <mpi.h>

#include <cstdint>

#include "distop/comm/backend.hpp"
#include "distop/comm/collectives.hpp"

namespace distop::comm {

// Completes `request`: MPI_Wait, or MPI_Test and yield when the node is oversubscribed
// (yield_when_idle); the hang watchdog sees the loop as one wait.
void finish(MPI_Request& request, const char* op);

// MPI on host buffers.
struct MpiBackend {
  template <class T>
  static void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm);
  template <class T>
  static void bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                              MPI_Comm comm);
  template <class T>
  static void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm);
  template <class T>
  static void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);
  template <class T>
  static Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm);
  template <class T>
  static Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm);
  template <class T>
  static Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);
  template <class T>
  static Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                            const int* recv_counts, const int* recv_displs, MPI_Comm comm);
  template <class T>
  static Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm);
};

// MPI on reused host staging buffers (staging.hpp): the caller's data is copied in, MpiBackend
// moves it (so its messages match MpiBackend's on other ranks), and the result is copied out.
// `memory` says where the caller's buffers live.
struct StagingBackend {
  template <class T>
  static void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm, Memory memory);
  template <class T>
  static void bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                              MPI_Comm comm, Memory memory);
  template <class T>
  static void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm,
                         Memory memory);
  template <class T>
  static void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm,
                            Memory memory);
  template <class T>
  static Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm,
                       Memory memory);
  template <class T>
  static Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm,
                       Memory memory);
  template <class T>
  static Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm,
                                Memory memory);
  template <class T>
  static Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                            const int* recv_counts, const int* recv_displs, MPI_Comm comm,
                            Memory memory);
  template <class T>
  static Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                             Memory memory);
};

// MPI directly on device buffers, for an MPI library that reports CUDA support. The producer
// stream is synchronised first (MPI reads the buffers from the host thread's point of view); MPI
// completes the transfer before a blocking call returns.
struct CudaAwareMpiBackend {
  template <class T>
  static void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm);
  template <class T>
  static void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm);
  template <class T>
  static void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);
  template <class T>
  static Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm);
  template <class T>
  static Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm);
  template <class T>
  static Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);
  template <class T>
  static Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                            const int* recv_counts, const int* recv_displs, MPI_Comm comm);
  template <class T>
  static Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm);
  // Waits for the work that produced device buffers (before MPI reads them).
  static void wait_for_producer(const char* op);
};

int checked_count(std::int64_t count, const char* op);

}  // namespace distop::comm
