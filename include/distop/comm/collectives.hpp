#pragma once
// The call surface every distop operator moves payload through: collectives and copies on buffers
// in distop's memory space (MemSpace).
//
// Host memory goes straight to MPI. Device memory (a CUDA Kokkos) goes to NCCL in builds with
// DISTOP_ENABLE_NCCL, and otherwise through host staging buffers, because the MPI distop is built
// against need not be CUDA-aware. Operators never call MPI on payload directly.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "distop/core/environment.hpp"

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
// yield_when_idle() (core/environment.hpp). Where it is true the collectives take their
// nonblocking forms.
using distop::yield_when_idle;

// The name of the backend device buffers use in this build: "mpi" (host memory), "mpi+staging"
// or "nccl".
const char* device_backend();

}  // namespace distop::comm

// Nonblocking transfers and located reductions.

namespace distop::comm {

// A nonblocking transfer in flight, from isend, irecv or iallreduce_sum: its MPI request and, in
// builds whose tensors live in device memory that MPI cannot read, the host staging buffer and the
// copy that puts received data in place. Move-only. wait() completes it with the same wait as the
// blocking calls (yielding the processor when the node is oversubscribed). Until then the caller
// keeps the buffers alive and leaves them alone (or hands them to keep_alive).
//
// Destroying a request that was never waited for neither blocks nor throws: a receive is cancelled
// (or, if already matched, completed), a send is left to complete on its own (MPI_Request_free),
// a collective is abandoned (MPI can neither cancel nor free one). The buffers an unfinished send
// or collective holds are deliberately leaked, since MPI may still read or write them.
class Request {
 public:
  enum class Kind { kNone, kSend, kReceive, kCollective };

  Request() = default;
  // Takes over `request`; `on_complete` runs once it has finished.
  Request(Kind kind, MPI_Request request, std::function<void()> on_complete = {});
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  // Whether it still has to be waited for.
  bool active() const noexcept { return kind_ != Kind::kNone; }
  Kind kind() const noexcept { return kind_; }
  // Completes the transfer; received data is in place afterwards. A no-op when not active.
  void wait();
  // Holds `buffer` until the transfer has completed.
  void keep_alive(std::shared_ptr<void> buffer);

 private:
  void abandon() noexcept;
  Kind kind_ = Kind::kNone;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::function<void()> on_complete_;
  std::vector<std::shared_ptr<void>> keep_;
};

// Posts a send of buf[0, count) to rank `dest` of comm, with `tag`.
template <class T>
Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm);
// Posts a receive of count elements from rank `source` of comm into buf (overwritten).
template <class T>
Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm);
// Posts recv = sum over comm of send (MPI_Iallreduce); send == recv is allowed (in place). Every
// rank of comm posts its nonblocking collectives on comm in the same order.
template <class T>
Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm);

// out[i] = the maximum (minimum) over comm of in[i], and owner[i] = the rank of comm that holds it,
// the lowest such rank on ties: MPI_MAXLOC (MPI_MINLOC) on (value, rank) pairs (MPI_FLOAT_INT,
// MPI_DOUBLE_INT). in == out is allowed; owner is host memory of count ints. Blocking.
template <class T>
void allreduce_maxloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm);
template <class T>
void allreduce_minloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm);

}  // namespace distop::comm
