// MpiBackend (MPI on host buffers) and CudaAwareMpiBackend (MPI on device buffers).
#include <sched.h>

#include <climits>
#include <cstddef>
#include <cstring>

#include "../core/scratch.hpp"
#include "backends.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"

#ifdef DISTOP_HAVE_CUDA
#include "device.hpp"
#endif

namespace distop::comm {

int checked_count(std::int64_t count, const char* op) {
  DISTOP_CHECK(count >= 0 && count <= INT_MAX, op, "message of ", count,
               " elements exceeds MPI's int count limit");
  return static_cast<int>(count);
}

void finish(MPI_Request& request, const char* op) {
  WatchedWait watch(op);  // the hang watchdog sees the polling loop as one wait
  if (!yield_when_idle()) {
    DISTOP_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE), op);
    return;
  }
  int done = 0;
  for (;;) {
    DISTOP_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE), op);
    if (done) return;
    sched_yield();
  }
}

namespace {

void local_copy(const void* src, void* dst, std::size_t bytes) {
  if (bytes > 0 && src != dst) std::memcpy(dst, src, bytes);
}

}  // namespace

// Blocking collectives, or their nonblocking forms finished by a wait that yields the processor
// between tests when the node runs more ranks than it has cores (see yield_when_idle()).
template <class T>
void MpiBackend::bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  const int n = checked_count(count, "bcast");
  if (yield_when_idle()) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Ibcast(buf, n, mpi_type<T>(), root, comm, &r), "bcast");
    finish(r, "bcast");
  } else {
    DISTOP_MPI_CHECK(MPI_Bcast(buf, n, mpi_type<T>(), root, comm), "bcast");
  }
}

template <class T>
void MpiBackend::bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                                 MPI_Comm comm) {
  int rank = 0, size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "bcast");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "bcast");
  const bool is_root = rank == root;
  const int n = checked_count(count, "bcast");
  const auto type = mpi_type<T>();
  const auto bytes = static_cast<std::size_t>(count) * sizeof(T);
  constexpr int kTag = 7;
  if (size == 2) {
    if (!is_root) {
      MPI_Request r;
      DISTOP_MPI_CHECK(MPI_Irecv(recv, n, type, root, kTag, comm, &r), "bcast");
      finish(r, "bcast");
      return;
    }
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Isend(send, n, type, 1 - root, kTag, comm, &r), "bcast");
    if (copy_to) local_copy(send, copy_to, bytes);
    finish(r, "bcast");
    return;
  }
  T* buf = is_root ? const_cast<T*>(send) : recv;
  // From 64 KiB on, the root writes its own copy while the broadcast is in flight. A nonblocking
  // broadcast matches only nonblocking ones, so every rank takes the same form, decided from what
  // all of them know alike: the count and the (agreed) yield setting.
#ifdef DISTOP_SMPI
  // SimGrid SMPI builds only: SMPI's MPI_Ibcast is the root sending to every rank in turn, its
  // MPI_Bcast the algorithm smpi/bcast selects (scripts/simulate.sh: MPICH's), so the simulation
  // takes the blocking form (the root's copy then follows the broadcast).
  const bool nonblocking = yield_when_idle();
#else
  const bool nonblocking = yield_when_idle() || bytes >= std::size_t{64} << 10;
#endif
  if (nonblocking) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Ibcast(buf, n, type, root, comm, &r), "bcast");
    if (is_root && copy_to) local_copy(send, copy_to, bytes);
    finish(r, "bcast");
    return;
  }
  DISTOP_MPI_CHECK(MPI_Bcast(buf, n, type, root, comm), "bcast");
  if (is_root && copy_to) local_copy(send, copy_to, bytes);
}

template <class T>
void MpiBackend::reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm) {
  const int n = checked_count(count, "reduce_sum");
  int rank = 0, size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reduce_sum");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "reduce_sum");
  const bool in_place = rank == root && send == nullptr;
  if (size == 2) {
    // One message and a local sum: several times faster than MPICH's MPI_Reduce here.
    constexpr int kTag = 8;
    MPI_Request r;
    if (rank != root) {
      DISTOP_MPI_CHECK(MPI_Isend(send, n, mpi_type<T>(), root, kTag, comm, &r), "reduce_sum");
      finish(r, "reduce_sum");
      return;
    }
    // The other rank's contribution, in host scratch from the library's pool.
    detail::Scratch<T> scratch(count, detail::ScratchSpace::kHost);
    T* other = scratch.data();
    DISTOP_MPI_CHECK(MPI_Irecv(other, n, mpi_type<T>(), 1 - root, kTag, comm, &r), "reduce_sum");
    finish(r, "reduce_sum");
    if (in_place) {
      for (std::int64_t i = 0; i < count; ++i) recv[i] += other[i];
    } else {
      for (std::int64_t i = 0; i < count; ++i) recv[i] = send[i] + other[i];
    }
    return;
  }
  const void* s = in_place ? MPI_IN_PLACE : send;
  if (yield_when_idle()) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Ireduce(s, recv, n, mpi_type<T>(), MPI_SUM, root, comm, &r), "reduce_sum");
    finish(r, "reduce_sum");
  } else {
    DISTOP_MPI_CHECK(MPI_Reduce(s, recv, n, mpi_type<T>(), MPI_SUM, root, comm), "reduce_sum");
  }
}

template <class T>
void MpiBackend::allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const int n = checked_count(count, "allreduce_sum");
  const void* s = send == recv ? MPI_IN_PLACE : send;
  if (yield_when_idle()) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Iallreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm, &r), "allreduce_sum");
    finish(r, "allreduce_sum");
  } else {
    DISTOP_MPI_CHECK(MPI_Allreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm), "allreduce_sum");
  }
}

template <class T>
Request MpiBackend::isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm) {
  const int n = checked_count(count, "isend");
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Isend(buf, n, mpi_type<T>(), dest, tag, comm, &r), "isend");
  return Request(Request::Kind::kSend, r);
}

template <class T>
Request MpiBackend::irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm) {
  const int n = checked_count(count, "irecv");
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Irecv(buf, n, mpi_type<T>(), source, tag, comm, &r), "irecv");
  return Request(Request::Kind::kReceive, r);
}

template <class T>
Request MpiBackend::iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const int n = checked_count(count, "iallreduce_sum");
  MPI_Request r = MPI_REQUEST_NULL;
  const void* s = send == recv ? MPI_IN_PLACE : send;
  DISTOP_MPI_CHECK(MPI_Iallreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm, &r), "iallreduce_sum");
  return Request(Request::Kind::kCollective, r);
}

template <class T>
Request MpiBackend::ialltoallv(const T* send, const int* send_counts, const int* send_displs,
                               T* recv, const int* recv_counts, const int* recv_displs,
                               MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Ialltoallv(send, send_counts, send_displs, mpi_type<T>(), recv, recv_counts,
                                  recv_displs, mpi_type<T>(), comm, &r),
                   "ialltoallv");
  return Request(Request::Kind::kCollective, r);
}

template <class T>
Request MpiBackend::iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  DISTOP_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                                   mpi_type<T>(), comm, &r),
                   "iallgatherv");
  return Request(Request::Kind::kCollective, r);
}

// CUDA-aware MPI: MPI's own collectives (the host shortcuts of MpiBackend read the buffers on the
// host), after the producer stream has finished writing them.

void CudaAwareMpiBackend::wait_for_producer([[maybe_unused]] const char* op) {
#ifdef DISTOP_HAVE_CUDA
  device::synchronize(device::producer_stream(), op);
#endif
}

template <class T>
void CudaAwareMpiBackend::bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  const int n = checked_count(count, "bcast");
  wait_for_producer("bcast");
  DISTOP_MPI_CHECK(MPI_Bcast(buf, n, mpi_type<T>(), root, comm), "bcast");
}

template <class T>
void CudaAwareMpiBackend::reduce_sum(const T* send, T* recv, std::int64_t count, int root,
                                     MPI_Comm comm) {
  const int n = checked_count(count, "reduce_sum");
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reduce_sum");
  wait_for_producer("reduce_sum");
  const void* s = rank == root && send == nullptr ? MPI_IN_PLACE : send;
  DISTOP_MPI_CHECK(MPI_Reduce(s, recv, n, mpi_type<T>(), MPI_SUM, root, comm), "reduce_sum");
}

template <class T>
void CudaAwareMpiBackend::allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const int n = checked_count(count, "allreduce_sum");
  wait_for_producer("allreduce_sum");
  const void* s = send == recv ? MPI_IN_PLACE : send;
  DISTOP_MPI_CHECK(MPI_Allreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm), "allreduce_sum");
}

template <class T>
Request CudaAwareMpiBackend::isend(const T* buf, std::int64_t count, int dest, int tag,
                                   MPI_Comm comm) {
  wait_for_producer("isend");
  return MpiBackend::isend(buf, count, dest, tag, comm);
}

template <class T>
Request CudaAwareMpiBackend::irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm) {
  // The buffer may still be read by kernels enqueued before: they finish before MPI writes it.
  wait_for_producer("irecv");
  return MpiBackend::irecv(buf, count, source, tag, comm);
}

template <class T>
Request CudaAwareMpiBackend::iallreduce_sum(const T* send, T* recv, std::int64_t count,
                                            MPI_Comm comm) {
  wait_for_producer("iallreduce_sum");
  return MpiBackend::iallreduce_sum(send, recv, count, comm);
}

template <class T>
Request CudaAwareMpiBackend::ialltoallv(const T* send, const int* send_counts,
                                        const int* send_displs, T* recv, const int* recv_counts,
                                        const int* recv_displs, MPI_Comm comm) {
  wait_for_producer("ialltoallv");
  return MpiBackend::ialltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs,
                                comm);
}

template <class T>
Request CudaAwareMpiBackend::iallgatherv(T* buf, const int* counts, const int* displs,
                                         MPI_Comm comm) {
  wait_for_producer("iallgatherv");
  return MpiBackend::iallgatherv(buf, counts, displs, comm);
}

#define DISTOP_INSTANTIATE(B, T)                                                               \
  template void B::bcast(T*, std::int64_t, int, MPI_Comm);                                     \
  template void B::reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm);                      \
  template void B::allreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                        \
  template Request B::isend(const T*, std::int64_t, int, int, MPI_Comm);                       \
  template Request B::irecv(T*, std::int64_t, int, int, MPI_Comm);                             \
  template Request B::iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                    \
  template Request B::ialltoallv(const T*, const int*, const int*, T*, const int*, const int*, \
                                 MPI_Comm);                                                    \
  template Request B::iallgatherv(T*, const int*, const int*, MPI_Comm);
DISTOP_INSTANTIATE(MpiBackend, float)
DISTOP_INSTANTIATE(MpiBackend, double)
DISTOP_INSTANTIATE(CudaAwareMpiBackend, float)
DISTOP_INSTANTIATE(CudaAwareMpiBackend, double)
#undef DISTOP_INSTANTIATE
template void MpiBackend::bcast_with_copy(const float*, float*, float*, std::int64_t, int,
                                          MPI_Comm);
template void MpiBackend::bcast_with_copy(const double*, double*, double*, std::int64_t, int,
                                          MPI_Comm);

}  // namespace distop::comm
