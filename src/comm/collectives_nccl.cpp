#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <Kokkos_Core.hpp>
#include <string>
#include <type_traits>

#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "nccl_backend.hpp"

// Calls a CUDA or NCCL function and throws distop::Error(op, ...) with `describe`'s text for its
// status unless it returned `success`.
#define DISTOP_STATUS_CHECK(call, op, success, describe)                                    \
  do {                                                                                      \
    const auto distop_rc_ = (call);                                                         \
    if (distop_rc_ != (success))                                                            \
      throw ::distop::Error((op), std::string(#call) + " failed: " + describe(distop_rc_)); \
  } while (0)
#define DISTOP_NCCL_CHECK(call, op) DISTOP_STATUS_CHECK(call, op, ncclSuccess, ncclGetErrorString)
#define DISTOP_CUDA_CHECK(call, op) DISTOP_STATUS_CHECK(call, op, cudaSuccess, cudaGetErrorString)

namespace distop::comm::nccl {

namespace {

struct Context {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

int destroy_context(MPI_Comm, int, void* value, void*) {
  auto* ctx = static_cast<Context*>(value);
  if (ctx->comm) ncclCommDestroy(ctx->comm);  // never throws: called from MPI_Comm_free
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  delete ctx;
  return MPI_SUCCESS;
}

int keyval() {
  static int key = [] {
    int k = MPI_KEYVAL_INVALID;
    DISTOP_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, destroy_context, &k, nullptr),
                     "nccl");
    return k;
  }();
  return key;
}

// Collective over comm on first use.
Context& context(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  DISTOP_MPI_CHECK(MPI_Comm_get_attr(comm, keyval(), &value, &found), "nccl");
  if (found) {
    auto& ctx = *static_cast<Context*>(value);
    DISTOP_CHECK(ctx.comm != nullptr, "nccl",
                 "this communicator's NCCL communicator was aborted after an earlier error");
    return ctx;
  }
  int rank = 0, size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "nccl");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "nccl");
  ncclUniqueId id;
  if (rank == 0) DISTOP_NCCL_CHECK(ncclGetUniqueId(&id), "nccl");
  DISTOP_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm), "nccl");
  auto* ctx = new Context;
  DISTOP_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "nccl");
  DISTOP_NCCL_CHECK(ncclCommInitRank(&ctx->comm, size, id, rank), "nccl");
  DISTOP_MPI_CHECK(MPI_Comm_set_attr(comm, keyval(), ctx), "nccl");
  return *ctx;
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else
    return ncclFloat64;
}

// NCCL runs on its own stream; the kernels (and cuBLAS calls) that wrote the buffers run on
// Kokkos' and may still be running: they finish first.
void wait_for_kernels() { Kokkos::fence(); }

// Waits for the collective, polling NCCL for asynchronous errors (a peer that failed or left)
// instead of blocking in cudaStreamSynchronize, which would never return. On such an error the
// communicator is aborted, which also ends the collective, and the error is thrown.
void finish(Context& ctx, const char* op) {
  for (;;) {
    const cudaError_t done = cudaStreamQuery(ctx.stream);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) DISTOP_CUDA_CHECK(done, op);
    ncclResult_t async = ncclSuccess;
    DISTOP_NCCL_CHECK(ncclCommGetAsyncError(ctx.comm, &async), op);
    if (async != ncclSuccess) {
      ncclCommAbort(ctx.comm);
      ctx.comm = nullptr;
      throw Error(op, std::string("NCCL reported an asynchronous error (") +
                          ncclGetErrorString(async) + "); the communicator was aborted");
    }
    sched_yield();
  }
}

}  // namespace

template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  auto& ctx = context(comm);
  wait_for_kernels();
  DISTOP_NCCL_CHECK(ncclBroadcast(buf, buf, static_cast<std::size_t>(count), nccl_type<T>(), root,
                                  ctx.comm, ctx.stream),
                    "bcast");
  finish(ctx, "bcast");
}

template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm) {
  auto& ctx = context(comm);
  wait_for_kernels();
  DISTOP_NCCL_CHECK(ncclReduce(send, recv, static_cast<std::size_t>(count), nccl_type<T>(), ncclSum,
                               root, ctx.comm, ctx.stream),
                    "reduce_sum");
  finish(ctx, "reduce_sum");
}

template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  auto& ctx = context(comm);
  wait_for_kernels();
  DISTOP_NCCL_CHECK(ncclAllReduce(send, recv, static_cast<std::size_t>(count), nccl_type<T>(),
                                  ncclSum, ctx.comm, ctx.stream),
                    "allreduce_sum");
  finish(ctx, "allreduce_sum");
}

namespace {

void record(Context& ctx, Pending& pending, const char* op) {
  cudaEvent_t event = nullptr;
  DISTOP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op);
  DISTOP_CUDA_CHECK(cudaEventRecord(event, ctx.stream), op);
  pending.event = event;
}

}  // namespace

template <class T>
void alltoallv_start(const T* send, const int* send_counts, const int* send_displs, T* recv,
                     const int* recv_counts, const int* recv_displs, MPI_Comm comm,
                     Pending& pending) {
  auto& ctx = context(comm);
  int size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "alltoallv");
  wait_for_kernels();
  DISTOP_NCCL_CHECK(ncclGroupStart(), "alltoallv");
  for (int q = 0; q < size; ++q) {
    if (send_counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclSend(send + send_displs[q], static_cast<std::size_t>(send_counts[q]),
                                 nccl_type<T>(), q, ctx.comm, ctx.stream),
                        "alltoallv");
    if (recv_counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclRecv(recv + recv_displs[q], static_cast<std::size_t>(recv_counts[q]),
                                 nccl_type<T>(), q, ctx.comm, ctx.stream),
                        "alltoallv");
  }
  DISTOP_NCCL_CHECK(ncclGroupEnd(), "alltoallv");
  record(ctx, pending, "alltoallv");
}

template <class T>
void allgatherv_start(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                      Pending& pending) {
  auto& ctx = context(comm);
  int size = 0, rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "allgatherv");
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "allgatherv");
  wait_for_kernels();
  DISTOP_NCCL_CHECK(ncclGroupStart(), "allgatherv");
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    if (counts[rank] > 0)
      DISTOP_NCCL_CHECK(ncclSend(buf + displs[rank], static_cast<std::size_t>(counts[rank]),
                                 nccl_type<T>(), q, ctx.comm, ctx.stream),
                        "allgatherv");
    if (counts[q] > 0)
      DISTOP_NCCL_CHECK(ncclRecv(buf + displs[q], static_cast<std::size_t>(counts[q]),
                                 nccl_type<T>(), q, ctx.comm, ctx.stream),
                        "allgatherv");
  }
  DISTOP_NCCL_CHECK(ncclGroupEnd(), "allgatherv");
  record(ctx, pending, "allgatherv");
}

bool test(Pending& pending, MPI_Comm comm, const char* op) {
  if (pending.event == nullptr) return true;
  auto& ctx = context(comm);
  auto event = static_cast<cudaEvent_t>(pending.event);
  const cudaError_t done = cudaEventQuery(event);
  if (done == cudaSuccess) {
    cudaEventDestroy(event);
    pending.event = nullptr;
    return true;
  }
  if (done != cudaErrorNotReady) DISTOP_CUDA_CHECK(done, op);
  ncclResult_t async = ncclSuccess;
  DISTOP_NCCL_CHECK(ncclCommGetAsyncError(ctx.comm, &async), op);
  if (async != ncclSuccess) {
    ncclCommAbort(ctx.comm);
    ctx.comm = nullptr;
    throw Error(op, std::string("NCCL reported an asynchronous error (") +
                        ncclGetErrorString(async) + "); the communicator was aborted");
  }
  return false;
}

void wait(Pending& pending, MPI_Comm comm, const char* op) {
  while (!test(pending, comm, op)) sched_yield();
}

void release(Pending& pending) noexcept {
  if (pending.event == nullptr) return;
  auto event = static_cast<cudaEvent_t>(pending.event);
  cudaEventSynchronize(event);
  cudaEventDestroy(event);
  pending.event = nullptr;
}

#define DISTOP_INSTANTIATE(T)                                                                 \
  template void bcast(T*, std::int64_t, int, MPI_Comm);                                       \
  template void reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm);                        \
  template void allreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                          \
  template void alltoallv_start(const T*, const int*, const int*, T*, const int*, const int*, \
                                MPI_Comm, Pending&);                                          \
  template void allgatherv_start(T*, const int*, const int*, MPI_Comm, Pending&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm::nccl
