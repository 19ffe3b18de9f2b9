// The NCCL backend (nccl_backend.hpp).
#include <cuda_runtime.h>
#include <nccl.h>

#include <Kokkos_Core.hpp>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "../core/cuda_check.hpp"
#include "device.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "nccl_backend.hpp"

// Calls an NCCL function and throws distop::Error(op, ...) with NCCL's message when it fails.
#define DISTOP_NCCL_CHECK(call, op) DISTOP_STATUS_CHECK(call, op, ncclSuccess, ncclGetErrorString)

namespace distop::comm::nccl {

namespace {

// An NCCL communicator over the ranks of an MPI communicator, after Aluminum's: it owns a
// duplicate of the MPI communicator (for its own setup messages), its stream, the NCCL
// communicator and the events that order it and the producer stream. Move-only.
class Communicator {
 public:
  // Collective over `comm`.
  explicit Communicator(MPI_Comm comm) : mpi_(Comm::duplicate(comm)) {
    const int rank = mpi_.rank(), size = mpi_.size();
    ncclUniqueId id;
    if (rank == 0) DISTOP_NCCL_CHECK(ncclGetUniqueId(&id), "nccl");
    DISTOP_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_.get()), "nccl");
    DISTOP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "nccl");
    DISTOP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "nccl");
    DISTOP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "nccl");
    DISTOP_NCCL_CHECK(ncclCommInitRank(&nccl_, size, id, rank), "nccl");
  }
  ~Communicator() {  // never throws: the releases below are unchecked
    if (nccl_) ncclCommDestroy(nccl_);
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Communicator(Communicator&& o) noexcept
      : mpi_(std::move(o.mpi_)),
        nccl_(std::exchange(o.nccl_, nullptr)),
        stream_(std::exchange(o.stream_, nullptr)),
        ready_(std::exchange(o.ready_, nullptr)),
        done_(std::exchange(o.done_, nullptr)) {}
  Communicator& operator=(Communicator&&) = delete;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t get(const char* op) const {
    DISTOP_CHECK(nccl_ != nullptr, op,
                 "this communicator's NCCL communicator was aborted after an earlier error");
    return nccl_;
  }
  cudaStream_t stream() const noexcept { return stream_; }

  // Orders the NCCL stream after the work enqueued so far on the producer stream.
  void enter(const char* op) {
    check_async_error(op);
    auto producer = static_cast<cudaStream_t>(device::producer_stream());
    DISTOP_CUDA_CHECK(cudaEventRecord(ready_, producer), op);
    DISTOP_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0), op);
  }
  // An event recorded on the NCCL stream after the work enqueued there so far (the caller owns it).
  cudaEvent_t record(const char* op) {
    cudaEvent_t event = nullptr;
    DISTOP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op);
    const cudaError_t rc = cudaEventRecord(event, stream_);
    if (rc != cudaSuccess) {
      cudaEventDestroy(event);  // unchecked: rc, the first error, is the one thrown
      DISTOP_CUDA_CHECK(rc, op);
    }
    return event;
  }
  // Orders the producer stream after the NCCL work enqueued so far: its later kernels see the
  // results, and the host returns at once. (cudaStreamWaitEvent waits for the event's state when it
  // is called, so one event serves every call.)
  void leave(const char* op) {
    DISTOP_CUDA_CHECK(cudaEventRecord(done_, stream_), op);
    DISTOP_CUDA_CHECK(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(device::producer_stream()), done_, 0), op);
  }
  // An asynchronous NCCL error (a peer that failed or left) aborts the communicator, which also
  // ends its operations in flight, and is thrown.
  void check_async_error(const char* op) {
    ncclResult_t async = ncclSuccess;
    DISTOP_NCCL_CHECK(ncclCommGetAsyncError(get(op), &async), op);
    if (async != ncclSuccess) {
      // Unchecked: the asynchronous error, thrown below, is the one to report.
      ncclCommAbort(nccl_);
      nccl_ = nullptr;
      throw Error(op, std::string("NCCL reported an asynchronous error (") +
                          ncclGetErrorString(async) + "); the communicator was aborted");
    }
  }

 private:
  Comm mpi_;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the producer stream, waited on by stream_
  cudaEvent_t done_ = nullptr;   // recorded on stream_, waited on by the producer stream
};

int destroy_communicator(MPI_Comm, int, void* value, void*) {
  delete static_cast<Communicator*>(value);  // never throws: called from MPI_Comm_free
  return MPI_SUCCESS;
}

int keyval() {
  static int key = [] {
    int k = MPI_KEYVAL_INVALID;
    DISTOP_MPI_CHECK(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, destroy_communicator, &k, nullptr), "nccl");
    return k;
  }();
  return key;
}

// Collective over comm on first use.
Communicator& communicator(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  DISTOP_MPI_CHECK(MPI_Comm_get_attr(comm, keyval(), &value, &found), "nccl");
  if (found) return *static_cast<Communicator*>(value);
  auto made = std::make_unique<Communicator>(comm);
  DISTOP_MPI_CHECK(MPI_Comm_set_attr(comm, keyval(), made.get()), "nccl");
  return *made.release();
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else
    return ncclFloat64;
}

// A nonblocking operation's request: it holds the event recorded after the operation; wait()
// makes the producer stream wait on it, destruction lets it go.
Request pending_request(Request::Kind kind, Communicator& c, MPI_Comm comm, const char* op) {
  cudaEvent_t recorded = c.record(op);
  auto held = std::make_shared<cudaEvent_t>(recorded);
  return Request(
      kind,
      [held, comm, op] {
        Pending p{*held};
        *held = nullptr;
        wait(p, comm, op);
      },
      [held]() {
        // Released once the operation has passed it; unchecked, as a Request's destructor runs it.
        if (*held) cudaEventDestroy(*held);
        *held = nullptr;
      });
}

}  // namespace

template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("bcast");
  DISTOP_NCCL_CHECK(ncclBroadcast(buf, buf, static_cast<std::size_t>(count), nccl_type<T>(), root,
                                  c.get("bcast"), c.stream()),
                    "bcast");
  c.leave("bcast");
}

template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("reduce_sum");
  DISTOP_NCCL_CHECK(ncclReduce(send, recv, static_cast<std::size_t>(count), nccl_type<T>(), ncclSum,
                               root, c.get("reduce_sum"), c.stream()),
                    "reduce_sum");
  c.leave("reduce_sum");
}

template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("allreduce_sum");
  DISTOP_NCCL_CHECK(ncclAllReduce(send, recv, static_cast<std::size_t>(count), nccl_type<T>(),
                                  ncclSum, c.get("allreduce_sum"), c.stream()),
                    "allreduce_sum");
  c.leave("allreduce_sum");
}

// NCCL has no tags: messages between two ranks of one communicator match in posting order, which
// distop's operators keep alike on both sides.
template <class T>
Request isend(const T* buf, std::int64_t count, int dest, int, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("isend");
  if (count > 0)
    DISTOP_NCCL_CHECK(ncclSend(buf, static_cast<std::size_t>(count), nccl_type<T>(), dest,
                               c.get("isend"), c.stream()),
                      "isend");
  return pending_request(Request::Kind::kSend, c, comm, "isend");
}

template <class T>
Request irecv(T* buf, std::int64_t count, int source, int, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("irecv");
  if (count > 0)
    DISTOP_NCCL_CHECK(ncclRecv(buf, static_cast<std::size_t>(count), nccl_type<T>(), source,
                               c.get("irecv"), c.stream()),
                      "irecv");
  return pending_request(Request::Kind::kReceive, c, comm, "irecv");
}

template <class T>
Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  auto& c = communicator(comm);
  c.enter("iallreduce_sum");
  DISTOP_NCCL_CHECK(ncclAllReduce(send, recv, static_cast<std::size_t>(count), nccl_type<T>(),
                                  ncclSum, c.get("iallreduce_sum"), c.stream()),
                    "iallreduce_sum");
  return pending_request(Request::Kind::kCollective, c, comm, "iallreduce_sum");
}

template <class T>
void exchange(const std::vector<Message>& messages, MPI_Comm comm) {
  if (messages.empty()) return;
  auto& c = communicator(comm);
  c.enter("Exchange");
  ncclComm_t nc = c.get("Exchange");
  DISTOP_NCCL_CHECK(ncclGroupStart(), "Exchange");
  for (const auto& m : messages) {
    if (m.count <= 0) continue;
    const auto n = static_cast<std::size_t>(m.count);
    const ncclResult_t rc = m.send ? ncclSend(m.buffer, n, nccl_type<T>(), m.peer, nc, c.stream())
                                   : ncclRecv(m.buffer, n, nccl_type<T>(), m.peer, nc, c.stream());
    if (rc != ncclSuccess) {
      ncclGroupEnd();  // unchecked: rc, the first error, is the one thrown
      DISTOP_NCCL_CHECK(rc, "Exchange");
    }
  }
  DISTOP_NCCL_CHECK(ncclGroupEnd(), "Exchange");
  c.leave("Exchange");
}

template <class T>
Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                   const int* recv_counts, const int* recv_displs, MPI_Comm comm) {
  auto& c = communicator(comm);
  int size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "alltoallv");
  c.enter("alltoallv");
  ncclComm_t nc = c.get("alltoallv");
  DISTOP_NCCL_CHECK(ncclGroupStart(), "alltoallv");
  for (int q = 0; q < size; ++q) {
    if (send_counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclSend(send + send_displs[q], static_cast<std::size_t>(send_counts[q]),
                                 nccl_type<T>(), q, nc, c.stream()),
                        "alltoallv");
    if (recv_counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclRecv(recv + recv_displs[q], static_cast<std::size_t>(recv_counts[q]),
                                 nccl_type<T>(), q, nc, c.stream()),
                        "alltoallv");
  }
  DISTOP_NCCL_CHECK(ncclGroupEnd(), "alltoallv");
  return pending_request(Request::Kind::kCollective, c, comm, "ialltoallv");
}

template <class T>
Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm) {
  auto& c = communicator(comm);
  int size = 0, rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "allgatherv");
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "allgatherv");
  c.enter("allgatherv");
  ncclComm_t nc = c.get("allgatherv");
  DISTOP_NCCL_CHECK(ncclGroupStart(), "allgatherv");
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    if (counts[rank] > 0)
      DISTOP_NCCL_CHECK(ncclSend(buf + displs[rank], static_cast<std::size_t>(counts[rank]),
                                 nccl_type<T>(), q, nc, c.stream()),
                        "allgatherv");
    if (counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclRecv(buf + displs[q], static_cast<std::size_t>(counts[q]),
                                 nccl_type<T>(), q, nc, c.stream()),
                        "allgatherv");
  }
  DISTOP_NCCL_CHECK(ncclGroupEnd(), "allgatherv");
  return pending_request(Request::Kind::kCollective, c, comm, "iallgatherv");
}

void wait(Pending& pending, MPI_Comm comm, const char* op) {
  if (pending.event == nullptr) return;
  auto event = static_cast<cudaEvent_t>(pending.event);
  pending.event = nullptr;
  const cudaError_t rc =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(device::producer_stream()), event, 0);
  cudaEventDestroy(event);  // unchecked: the wait's status, rc, is the one to report
  DISTOP_CUDA_CHECK(rc, op);
  communicator(comm).check_async_error(op);
}

#define DISTOP_INSTANTIATE(T)                                                               \
  template void bcast(T*, std::int64_t, int, MPI_Comm);                                     \
  template void reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm);                      \
  template void allreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                        \
  template Request isend(const T*, std::int64_t, int, int, MPI_Comm);                       \
  template Request irecv(T*, std::int64_t, int, int, MPI_Comm);                             \
  template Request iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                    \
  template void exchange<T>(const std::vector<Message>&, MPI_Comm);                         \
  template Request ialltoallv(const T*, const int*, const int*, T*, const int*, const int*, \
                              MPI_Comm);                                                    \
  template Request iallgatherv(T*, const int*, const int*, MPI_Comm);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm::nccl
