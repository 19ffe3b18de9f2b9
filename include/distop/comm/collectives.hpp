#pragma once
// The call surface every distop operator moves payload through: collectives and copies on buffers
// in distop's memory space (MemSpace).
//
// Each call goes to a backend (comm/backend.hpp) chosen by where its buffers live: host memory to
// MPI (or, when selected, host staging), device memory to NCCL in builds with DISTOP_ENABLE_NCCL,
// else to a CUDA-aware MPI where the library reports one, else through reused host staging
// buffers. Operators never call MPI on payload directly.
//
// Device buffers and streams: a call on device buffers is ordered after the work already enqueued
// on Kokkos' default execution space instance (the producer stream), and the work enqueued there
// afterwards sees its result. With NCCL the blocking calls return once the operation is enqueued
// (the producer stream waits on its completion event); host code that reads the result directly
// fences first, as after any Kokkos kernel. The other backends complete before returning.

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

// The name of the backend buffers in distop's memory space (MemSpace) go through in this run
// (to_string of comm::backend(): "mpi", "staging", "cuda-aware-mpi" or "nccl").
const char* device_backend();

}  // namespace distop::comm

// Nonblocking transfers and located reductions.

namespace distop::comm {

// A nonblocking transfer in flight, from isend, irecv, iallreduce_sum, ialltoallv or iallgatherv:
// its MPI request and, for staged device buffers, the host staging buffer and the copy that puts
// received data in place; or, for NCCL, the event recorded after the operation on the NCCL stream.
// Move-only. wait() completes it with the same wait as the blocking calls (yielding the processor
// when the node is oversubscribed). Until then the caller keeps the buffers alive and leaves them
// alone (or hands them to keep_alive).
//
// Destroying a request that was never waited for neither blocks nor throws: a receive is cancelled
// (or, if already matched, completed), a send is left to complete on its own (MPI_Request_free),
// a collective is abandoned (MPI can neither cancel nor free one). The buffers an unfinished send
// or collective holds are deliberately leaked, since MPI may still read or write them. An NCCL
// transfer's wait() makes the producer stream wait on its event (no host wait, no polling loop);
// destroying it unwaited lets the event go.
class Request {
 public:
  enum class Kind { kNone, kSend, kReceive, kCollective };

  Request() = default;
  // Takes over `request`; `on_complete` runs once it has finished.
  Request(Kind kind, MPI_Request request, std::function<void()> on_complete = {});
  // A transfer another library completes (NCCL): `complete` completes it (and may throw),
  // `let_go` gives up on it without blocking or throwing.
  Request(Kind kind, std::function<void()> complete, std::function<void()> let_go);
  // A transfer driven by a schedule of its own (the pairwise exchanges): `progress` advances it
  // without blocking and returns whether it has finished (test() calls it), `complete` finishes
  // it (wait()), `let_go` gives up on it without blocking or throwing (destruction).
  Request(Kind kind, std::function<bool()> progress, std::function<void()> complete,
          std::function<void()> let_go);
  // `posted` with `on_complete` run after it has finished (before any it already had).
  static Request with_completion(Request posted, std::function<void()> on_complete);
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
  // Completes the transfer if it has finished (MPI_Test, which also advances MPI's progress) and
  // returns whether it is complete (true when not active). A transfer another library completes
  // (NCCL) progresses by itself and is completed by wait() only: test() returns false for it. A
  // scheduled transfer (pairwise exchange) is advanced: finished rounds are retired and further
  // rounds posted.
  bool test();
  // Holds `buffer` until the transfer has completed.
  void keep_alive(std::shared_ptr<void> buffer);

 private:
  void abandon() noexcept;
  Kind kind_ = Kind::kNone;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::function<void()> on_complete_;
  std::function<bool()> progress_;  // scheduled transfers: advances them, true once finished
  std::function<void()> complete_;  // non-MPI transfers: completes them
  std::function<void()> let_go_;    // non-MPI transfers: abandons them
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
// How ialltoallv and iallgatherv move their blocks. kCollective: MPI's nonblocking collective
// (MPI_Ialltoallv, MPI_Iallgatherv), which MPI may run as R(R - 1) concurrent messages over a
// group of R ranks. kPairwise: R - 1 rounds of point-to-point messages, round k = 1..R-1 sending
// this rank's block for rank (me + k) % R and receiving the block from rank (me - k + R) % R, at
// most `window` rounds in flight: Request::test() retires finished rounds and posts the next ones,
// Request::wait() drives the rest. This rank's own block is a local copy. The data moved, hence
// the result, is the same bits either way; pairwise bounds the messages in flight (MPICH throttles
// its own alltoall to 32 by default, MPIR_CVAR_ALLTOALL_THROTTLE; SMPI and its flow-level network
// model do not, and the model's cost grows about as the square of the concurrent flows). The
// point-to-point messages of one pairwise exchange carry a tag of their own, taken from a counter
// cached on the communicator (tags 16384-32767 cycle), so exchanges in flight together on one
// communicator never match each other's messages; the communicator's other point-to-point traffic
// should use tags below 16384. With NCCL the grouped ncclSend/ncclRecv path is taken either way.
struct ExchangeSchedule {
  enum class Form { kCollective, kPairwise };
  Form form = Form::kCollective;
  int window = 32;  // rounds in flight with kPairwise; at least 1 (distop::Error otherwise)

  static ExchangeSchedule collective() { return {}; }
  static ExchangeSchedule pairwise(int window) { return {Form::kPairwise, window}; }
};

// Posts MPI_Ialltoallv's movement: send[send_displs[q], + send_counts[q]) to rank q of comm, and
// recv_counts[q] entries from rank q into recv[recv_displs[q], ...) (the rest of recv untouched).
// The count and displacement arrays (one entry per rank of comm, host memory) stay alive and
// unchanged until the request has completed; send and recv do not overlap. With NCCL, grouped
// ncclSend/ncclRecv on the communicator's NCCL stream. `schedule` picks MPI's collective or
// pairwise rounds (ExchangeSchedule); with pairwise, send_counts[me] equals recv_counts[me]
// (distop::Error otherwise) and the rank's own block is copied locally.
template <class T>
Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                   const int* recv_counts, const int* recv_displs, MPI_Comm comm,
                   ExchangeSchedule schedule = {});
// Posts an in-place all-gather (MPI_Iallgatherv with MPI_IN_PLACE): rank q's block
// buf[displs[q], + counts[q]) to every rank of comm, into the same place of its buf. The arrays
// stay alive and unchanged until the request has completed, as for ialltoallv. `schedule` as for
// ialltoallv: pairwise round k sends this rank's block to rank (me + k) % R and receives rank
// (me - k + R) % R's block in place.
template <class T>
Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                    ExchangeSchedule schedule = {});
// Blocking: recv[displs[q], + counts[q]) = rank q's send[0, counts[q]) for every rank q of comm
// (MPI_Allgatherv's result); send_count is counts[this rank] (distop::Error otherwise). send may be
// recv + displs[this rank] (in place).
template <class T>
void allgatherv(const T* send, std::int64_t send_count, T* recv, const int* counts,
                const int* displs, MPI_Comm comm);

// out[i] = the maximum (minimum) over comm of in[i], and owner[i] = the rank of comm that holds it,
// the lowest such rank on ties: MPI_MAXLOC (MPI_MINLOC) on (value, rank) pairs (MPI_FLOAT_INT,
// MPI_DOUBLE_INT). in == out is allowed; owner is host memory of count ints. Blocking.
template <class T>
void allreduce_maxloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm);
template <class T>
void allreduce_minloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm);

}  // namespace distop::comm
