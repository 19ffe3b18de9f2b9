#pragma once
// The call surface every distop operator moves payload through: collectives and copies on buffers
// in distop's memory space (MemSpace).
//
// Host memory goes straight to MPI. Device memory (a CUDA Kokkos) goes to NCCL in builds with
// DISTOP_ENABLE_NCCL, and otherwise through host staging buffers, because the MPI distop is built
// against need not be CUDA-aware. Operators never call MPI on payload directly.

#include <mpi.h>

#include <cstdint>

namespace distop::comm {

// buf on every rank of comm; root's entries overwrite the others'.
template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm);
// A broadcast whose root also keeps a copy: the root sends `send` to the other ranks and, while
// the message is in flight, copies it to `copy_to` (if not null); the other ranks receive into
// `recv`. A group of two is one point-to-point message; larger groups overlap MPI_Ibcast with
// the copy from 64 KiB up (below that MPI_Bcast, then the copy, is faster).
template <class T>
void bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                     MPI_Comm comm);
// recv (on root) = sum over comm of send. send == nullptr on root means "in place": root's
// contribution is recv's current content. recv is ignored off root.
template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm);
// recv = sum over comm of send; send == recv is allowed (in place).
template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);

// Local copies and fills in MemSpace.
template <class T>
void copy(const T* src, T* dst, std::int64_t count);
template <class T>
void fill_zero(T* dst, std::int64_t count);

// Whether waits yield the processor between tests of a nonblocking request instead of spinning:
// true when this node runs more MPI ranks than it has cores (MPICH polls, so spinning ranks would
// take the cores from the ranks doing the work), or as DISTOP_YIELD_WHEN_IDLE=1/0 says. Decided
// once: by decide_yield_when_idle, which Environment calls (collective over `world`), or else
// from the launcher's MPI_LOCALNRANKS without messages.
bool yield_when_idle();
void decide_yield_when_idle(MPI_Comm world);

// The name of the backend device buffers use in this build: "mpi" (host memory), "mpi+staging"
// or "nccl".
const char* device_backend();

}  // namespace distop::comm
