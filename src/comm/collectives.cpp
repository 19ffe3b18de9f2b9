#include "distop/comm/collectives.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../core/scratch.hpp"
#include "backends.hpp"
#include "distop/comm/backend.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/tensor.hpp"
#include "staging.hpp"

#ifdef DISTOP_HAVE_NCCL
#include "nccl_backend.hpp"
#endif

// The call surface: each operation goes to the backend that serves the memory its buffers live in
// (backend.hpp). A backend that this build lacks is never selected (select_backend and
// DISTOP_COMM_BACKEND refuse it), so the NCCL branches of a build without NCCL are unreachable.

namespace distop::comm {

namespace {

template <class T>
using Unmanaged = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

#ifndef DISTOP_HAVE_NCCL
[[noreturn]] void no_nccl(const char* op) {
  throw Error(op, "the nccl backend is not in this build");
}
#endif

}  // namespace

const char* device_backend() {
  return to_string(backend(kHostAccessible ? Memory::kHost : Memory::kDevice));
}

template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  const Memory memory = memory_of(buf);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::bcast(buf, count, root, comm);
    case Backend::kStaging:
      return StagingBackend::bcast(buf, count, root, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::bcast(buf, count, root, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "bcast");
      return nccl::bcast(buf, count, root, comm);
#else
      no_nccl("bcast");
#endif
  }
}

template <class T>
void bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                     MPI_Comm comm) {
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "bcast");
  const bool is_root = rank == root;
  const Memory memory = memory_of(is_root ? static_cast<const void*>(send) : recv);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::bcast_with_copy(send, copy_to, recv, count, root, comm);
    case Backend::kStaging:
      return StagingBackend::bcast_with_copy(send, copy_to, recv, count, root, comm, memory);
    case Backend::kCudaAwareMpi:
    case Backend::kNccl:
      // Device buffers: the broadcast, then the root's copy on the device (ordered after it).
      if (is_root) {
        bcast(const_cast<T*>(send), count, root, comm);
        if (copy_to) copy(send, copy_to, count);
      } else {
        bcast(recv, count, root, comm);
      }
      return;
  }
}

template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm) {
  const Memory memory = memory_of(send ? static_cast<const void*>(send) : recv);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::reduce_sum(send, recv, count, root, comm);
    case Backend::kStaging:
      return StagingBackend::reduce_sum(send, recv, count, root, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::reduce_sum(send, recv, count, root, comm);
    case Backend::kNccl: {
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "reduce_sum");
      int rank = 0;
      DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reduce_sum");
      return nccl::reduce_sum(rank == root && send == nullptr ? recv : send, recv, count, root,
                              comm);
#else
      no_nccl("reduce_sum");
#endif
    }
  }
}

template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const Memory memory = memory_of(send);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::allreduce_sum(send, recv, count, comm);
    case Backend::kStaging:
      return StagingBackend::allreduce_sum(send, recv, count, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::allreduce_sum(send, recv, count, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "allreduce_sum");
      return nccl::allreduce_sum(send, recv, count, comm);
#else
      no_nccl("allreduce_sum");
#endif
  }
}

// Local copies and fills: a memcpy on the host; on the device, enqueued on the default execution
// space instance (ordered with the kernels there, no fence).
template <class T>
void copy(const T* src, T* dst, std::int64_t count) {
  if (count <= 0 || src == dst) return;
  if constexpr (kHostAccessible) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
    return;
  }
  Kokkos::deep_copy(ExecSpace(), Unmanaged<T>(dst, static_cast<std::size_t>(count)),
                    Unmanaged<const T>(src, static_cast<std::size_t>(count)));
}

template <class T>
void fill_zero(T* dst, std::int64_t count) {
  if (count <= 0) return;
  if constexpr (kHostAccessible) {
    std::fill(dst, dst + count, T(0));
    return;
  }
  Kokkos::deep_copy(ExecSpace(), Unmanaged<T>(dst, static_cast<std::size_t>(count)), T(0));
}

#define DISTOP_INSTANTIATE(T)                                                   \
  template void bcast(T*, std::int64_t, int, MPI_Comm);                         \
  template void bcast_with_copy(const T*, T*, T*, std::int64_t, int, MPI_Comm); \
  template void reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm);          \
  template void allreduce_sum(const T*, T*, std::int64_t, MPI_Comm);            \
  template void copy(const T*, T*, std::int64_t);                               \
  template void fill_zero(T*, std::int64_t);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm

// Nonblocking transfers and located reductions.

namespace distop::comm {

namespace {

// The buffers of transfers abandoned unfinished: never freed, since MPI may still read or write
// them (and freeing device memory after Kokkos::finalize would abort the program).
void bury(std::vector<std::shared_ptr<void>>& buffers) noexcept {
  if (buffers.empty()) return;
  static std::mutex mutex;
  static auto* graveyard = new std::vector<std::shared_ptr<void>>();
  try {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& b : buffers) graveyard->push_back(std::move(b));
  } catch (...) {  // out of memory: nothing better to do than to let them go
  }
  buffers.clear();
}

}  // namespace

Request::Request(Kind kind, MPI_Request request, std::function<void()> on_complete)
    : kind_(request == MPI_REQUEST_NULL ? Kind::kNone : kind),
      request_(request),
      on_complete_(std::move(on_complete)) {}

Request::Request(Kind kind, std::function<void()> complete, std::function<void()> let_go)
    : kind_(complete ? kind : Kind::kNone),
      complete_(std::move(complete)),
      let_go_(std::move(let_go)) {}

Request::Request(Kind kind, std::function<bool()> progress, std::function<void()> complete,
                 std::function<void()> let_go)
    : kind_(complete ? kind : Kind::kNone),
      progress_(std::move(progress)),
      complete_(std::move(complete)),
      let_go_(std::move(let_go)) {}

Request Request::with_completion(Request posted, std::function<void()> on_complete) {
  if (!posted.active()) {
    // Already complete (an empty transfer MPI finished at once): the completion runs now.
    if (on_complete) on_complete();
    return posted;
  }
  if (posted.on_complete_) {
    posted.on_complete_ = [first = std::move(on_complete), then = std::move(posted.on_complete_)] {
      first();
      then();
    };
  } else {
    posted.on_complete_ = std::move(on_complete);
  }
  return posted;
}

Request::Request(Request&& other) noexcept
    : kind_(std::exchange(other.kind_, Kind::kNone)),
      request_(std::exchange(other.request_, MPI_REQUEST_NULL)),
      on_complete_(std::exchange(other.on_complete_, nullptr)),
      progress_(std::exchange(other.progress_, nullptr)),
      complete_(std::exchange(other.complete_, nullptr)),
      let_go_(std::exchange(other.let_go_, nullptr)),
      keep_(std::move(other.keep_)) {
  other.keep_.clear();
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    abandon();
    kind_ = std::exchange(other.kind_, Kind::kNone);
    request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
    on_complete_ = std::exchange(other.on_complete_, nullptr);
    progress_ = std::exchange(other.progress_, nullptr);
    complete_ = std::exchange(other.complete_, nullptr);
    let_go_ = std::exchange(other.let_go_, nullptr);
    keep_ = std::move(other.keep_);
    other.keep_.clear();
  }
  return *this;
}

Request::~Request() { abandon(); }

void Request::keep_alive(std::shared_ptr<void> buffer) { keep_.push_back(std::move(buffer)); }

void Request::wait() {
  if (kind_ == Kind::kNone) {
    keep_.clear();
    return;
  }
  kind_ = Kind::kNone;  // from here on, MPI (or NCCL) owns nothing of this request
  try {
    if (complete_) {
      auto complete = std::move(complete_);
      complete_ = nullptr;
      progress_ = nullptr;
      let_go_ = nullptr;
      complete();
    } else {
      finish(request_, "Request::wait");
    }
  } catch (...) {
    request_ = MPI_REQUEST_NULL;
    on_complete_ = nullptr;
    bury(keep_);
    throw;
  }
  request_ = MPI_REQUEST_NULL;
  auto complete = std::move(on_complete_);
  on_complete_ = nullptr;
  if (complete) complete();  // reads the staging buffers, still held in keep_
  keep_.clear();
}

bool Request::test() {
  if (kind_ == Kind::kNone) {
    keep_.clear();
    return true;
  }
  int done = 0;
  if (complete_) {
    if (!progress_) return false;  // NCCL: completed by wait()
    if (!progress_()) return false;
    complete_ = nullptr;
    progress_ = nullptr;
    let_go_ = nullptr;
  } else {
    DISTOP_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "Request::test");
    if (!done) return false;
  }
  kind_ = Kind::kNone;
  request_ = MPI_REQUEST_NULL;
  auto complete = std::move(on_complete_);
  on_complete_ = nullptr;
  if (complete) complete();  // reads the staging buffers, still held in keep_
  keep_.clear();
  return true;
}

void Request::abandon() noexcept {
  if (kind_ == Kind::kNone) return;
  bool released = false;
  if (complete_) {
    // NCCL: the operation goes on on its stream; its event is let go, its buffers kept.
    if (let_go_) let_go_();
  } else {
    // Unchecked (noexcept, run by destructors): where a call fails the buffers are buried below.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (kind_ == Kind::kReceive) {
        // A cancelled receive completes locally: at once if it was not matched yet, else once its
        // data is in. Either way MPI is done with the buffer afterwards.
        released = MPI_Cancel(&request_) == MPI_SUCCESS &&
                   MPI_Wait(&request_, MPI_STATUS_IGNORE) == MPI_SUCCESS;
      } else if (kind_ == Kind::kSend) {
        MPI_Request_free(&request_);
      }
    }
  }
  if (!released) bury(keep_);
  keep_.clear();
  on_complete_ = nullptr;
  progress_ = nullptr;
  complete_ = nullptr;
  let_go_ = nullptr;
  kind_ = Kind::kNone;
  request_ = MPI_REQUEST_NULL;
}

template <class T>
Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm) {
  const Memory memory = memory_of(buf);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::isend(buf, count, dest, tag, comm);
    case Backend::kStaging:
      return StagingBackend::isend(buf, count, dest, tag, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::isend(buf, count, dest, tag, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "isend");
      return nccl::isend(buf, count, dest, tag, comm);
#else
      no_nccl("isend");
#endif
  }
  return Request();
}

template <class T>
Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm) {
  const Memory memory = memory_of(buf);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::irecv(buf, count, source, tag, comm);
    case Backend::kStaging:
      return StagingBackend::irecv(buf, count, source, tag, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::irecv(buf, count, source, tag, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "irecv");
      return nccl::irecv(buf, count, source, tag, comm);
#else
      no_nccl("irecv");
#endif
  }
  return Request();
}

template <class T>
Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const Memory memory = memory_of(send);
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::iallreduce_sum(send, recv, count, comm);
    case Backend::kStaging:
      return StagingBackend::iallreduce_sum(send, recv, count, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::iallreduce_sum(send, recv, count, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      checked_count(count, "iallreduce_sum");
      return nccl::iallreduce_sum(send, recv, count, comm);
#else
      no_nccl("iallreduce_sum");
#endif
  }
  return Request();
}

namespace {

// A tag of its own for each pairwise exchange on a communicator: a counter cached on it (every
// rank posts its exchanges on comm in the same order, so the counters agree), cycling through
// [kFirstPairwiseTag, kFirstPairwiseTag + kPairwiseTags).
constexpr int kFirstPairwiseTag = 1 << 14;
constexpr int kPairwiseTags = (1 << 15) - 1 - kFirstPairwiseTag;

int delete_counter(MPI_Comm, int, void* value, void*) {
  delete static_cast<std::uint64_t*>(value);
  return MPI_SUCCESS;
}

int next_pairwise_tag(MPI_Comm comm) {
  static int keyval = MPI_KEYVAL_INVALID;
  if (keyval == MPI_KEYVAL_INVALID)
    DISTOP_MPI_CHECK(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_counter, &keyval, nullptr),
        "pairwise exchange");
  void* value = nullptr;
  int found = 0;
  DISTOP_MPI_CHECK(MPI_Comm_get_attr(comm, keyval, &value, &found), "pairwise exchange");
  auto* counter = static_cast<std::uint64_t*>(value);
  if (!found) {
    counter = new std::uint64_t(0);
    DISTOP_MPI_CHECK(MPI_Comm_set_attr(comm, keyval, counter), "pairwise exchange");
  }
  return kFirstPairwiseTag + static_cast<int>((*counter)++ % kPairwiseTags);
}

// The rounds of a pairwise exchange and the ones in flight (ExchangeSchedule::kPairwise).
template <class T>
class PairwiseExchange {
 public:
  struct Round {
    const T* send;
    std::int64_t send_count;
    int dest;
    T* recv;
    std::int64_t recv_count;
    int source;
  };

  PairwiseExchange(std::vector<Round> rounds, int window, MPI_Comm comm)
      : rounds_(std::move(rounds)), window_(window), tag_(next_pairwise_tag(comm)), comm_(comm) {
    post();
  }

  // Retires the finished rounds at the head of the window (oldest first), posts the next ones;
  // whether all finished. It stops at the first round still in flight: rounds finish about in
  // the order they were posted, one test advances MPI's progress for all of them, and a call that
  // finds nothing new costs one or two tests rather than one per round in flight (a simulator such
  // as SMPI charges each failed test, and more for each one in a row).
  bool progress() {
    while (!flight_.empty()) {
      InFlight& f = flight_.front();
      const bool received = f.recv.test();
      if (!received || !f.send.test()) break;
      flight_.erase(flight_.begin());
    }
    post();
    return flight_.empty();
  }

  // Drives the rest to completion: waits for the oldest round in flight, posts the next.
  void complete() {
    while (!flight_.empty()) {
      flight_.front().recv.wait();
      flight_.front().send.wait();
      flight_.erase(flight_.begin());
      post();
    }
  }

  // Gives up without blocking: each round's requests abandon themselves (receives cancelled,
  // sends freed); the rounds not posted are never posted.
  void let_go() noexcept {
    next_ = rounds_.size();
    flight_.clear();
  }

 private:
  struct InFlight {
    Request recv;
    Request send;
  };

  void post() {
    while (flight_.size() < static_cast<std::size_t>(window_) && next_ < rounds_.size()) {
      const Round& r = rounds_[next_++];
      InFlight f;
      if (r.recv_count > 0) f.recv = irecv(r.recv, r.recv_count, r.source, tag_, comm_);
      if (r.send_count > 0) f.send = isend(r.send, r.send_count, r.dest, tag_, comm_);
      flight_.push_back(std::move(f));
    }
  }

  std::vector<Round> rounds_;
  std::size_t next_ = 0;
  int window_;
  int tag_;
  MPI_Comm comm_;
  std::vector<InFlight> flight_;
};

template <class T>
Request start_pairwise(std::vector<typename PairwiseExchange<T>::Round> rounds, int window,
                       MPI_Comm comm) {
  auto exchange = std::make_shared<PairwiseExchange<T>>(std::move(rounds), window, comm);
  if (exchange->progress()) return Request();
  return Request(
      Request::Kind::kCollective, [exchange] { return exchange->progress(); },
      [exchange] { exchange->complete(); }, [exchange]() noexcept { exchange->let_go(); });
}

bool takes_pairwise(ExchangeSchedule schedule, Backend chosen, const char* op) {
  if (schedule.form != ExchangeSchedule::Form::kPairwise) return false;
  DISTOP_CHECK(schedule.window >= 1, op, "a pairwise exchange's window is at least 1 round, not ",
               schedule.window);
  return chosen != Backend::kNccl;  // NCCL: its grouped path either way
}

}  // namespace

template <class T>
Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                   const int* recv_counts, const int* recv_displs, MPI_Comm comm,
                   ExchangeSchedule schedule) {
  const Memory memory = memory_of(send ? static_cast<const void*>(send) : recv);
  if (takes_pairwise(schedule, backend(memory), "ialltoallv")) {
    int rank = 0;
    int size = 1;
    DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "ialltoallv");
    DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "ialltoallv");
    DISTOP_CHECK(send_counts[rank] == recv_counts[rank], "ialltoallv", "this rank sends ",
                 send_counts[rank], " entries to itself but receives ", recv_counts[rank]);
    copy(send + send_displs[rank], recv + recv_displs[rank], send_counts[rank]);
    std::vector<typename PairwiseExchange<T>::Round> rounds;
    rounds.reserve(static_cast<std::size_t>(size - 1));
    for (int k = 1; k < size; ++k) {
      const int dest = (rank + k) % size;
      const int source = (rank - k + size) % size;
      rounds.push_back({send + send_displs[dest], send_counts[dest], dest,
                        recv + recv_displs[source], recv_counts[source], source});
    }
    return start_pairwise<T>(std::move(rounds), schedule.window, comm);
  }
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::ialltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs,
                                    comm);
    case Backend::kStaging:
      return StagingBackend::ialltoallv(send, send_counts, send_displs, recv, recv_counts,
                                        recv_displs, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::ialltoallv(send, send_counts, send_displs, recv, recv_counts,
                                             recv_displs, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      return nccl::ialltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, comm);
#else
      no_nccl("ialltoallv");
#endif
  }
  return Request();
}

template <class T>
Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                    ExchangeSchedule schedule) {
  const Memory memory = memory_of(buf);
  if (takes_pairwise(schedule, backend(memory), "iallgatherv")) {
    int rank = 0;
    int size = 1;
    DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "iallgatherv");
    DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "iallgatherv");
    std::vector<typename PairwiseExchange<T>::Round> rounds;
    rounds.reserve(static_cast<std::size_t>(size - 1));
    for (int k = 1; k < size; ++k) {
      const int dest = (rank + k) % size;
      const int source = (rank - k + size) % size;
      rounds.push_back(
          {buf + displs[rank], counts[rank], dest, buf + displs[source], counts[source], source});
    }
    return start_pairwise<T>(std::move(rounds), schedule.window, comm);
  }
  switch (backend(memory)) {
    case Backend::kMpi:
      return MpiBackend::iallgatherv(buf, counts, displs, comm);
    case Backend::kStaging:
      return StagingBackend::iallgatherv(buf, counts, displs, comm, memory);
    case Backend::kCudaAwareMpi:
      return CudaAwareMpiBackend::iallgatherv(buf, counts, displs, comm);
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      return nccl::iallgatherv(buf, counts, displs, comm);
#else
      no_nccl("iallgatherv");
#endif
  }
  return Request();
}

template <class T>
void allgatherv(const T* send, std::int64_t send_count, T* recv, const int* counts,
                const int* displs, MPI_Comm comm) {
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "allgatherv");
  DISTOP_CHECK(send_count == counts[rank], "allgatherv", "this rank sends ", send_count,
               " entries but its count is ", counts[rank]);
  // This rank's block into place, then the in-place all-gather (ordered after the copy).
  if (send_count > 0) copy(send, recv + displs[rank], send_count);
#ifdef DISTOP_SMPI
  // SimGrid SMPI builds only: SMPI runs a nonblocking all-gather as every pair's message at once
  // (P (P - 1) messages, which no MPI does and a 1,024-rank simulation cannot afford), while its
  // blocking MPI_Allgatherv runs the algorithm smpi/allgatherv selects (scripts/simulate.sh:
  // MPICH's).
  if (backend(memory_of(recv)) == Backend::kMpi) {
    DISTOP_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts, displs,
                                    mpi_type<T>(), comm),
                     "allgatherv");
    return;
  }
#endif
  iallgatherv(recv, counts, displs, comm).wait();
}

namespace {

// The layouts of MPI_FLOAT_INT and MPI_DOUBLE_INT.
template <class T>
struct ValueRank {
  T value;
  int rank;
};
template <class T>
MPI_Datatype value_rank_type() {
  if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT_INT;
  } else {
    return MPI_DOUBLE_INT;
  }
}

template <class T>
void allreduce_located(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm,
                       MPI_Op op, const char* name) {
  const int n = checked_count(count, name);
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), name);
  const auto size = static_cast<std::size_t>(count);
  // Values and pairs in host buffers: the values staged where they live in device memory.
  const Memory memory = memory_of(in);
  staging::Lease values_lease(memory == Memory::kHost ? 0 : size * sizeof(T));
  const T* values = in;
  if (memory == Memory::kDevice) {
    staging::copy_in(values_lease.data(), in, size * sizeof(T), memory, name);
    values = values_lease.as<const T>();
  }
  detail::Scratch<ValueRank<T>> pairs_scratch(count, detail::ScratchSpace::kHost);
  auto* pairs = pairs_scratch.data();
  for (std::size_t i = 0; i < size; ++i) pairs[i] = {values[i], rank};
  if (yield_when_idle()) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, pairs, n, value_rank_type<T>(), op, comm, &r),
                     name);
    finish(r, name);
  } else {
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, pairs, n, value_rank_type<T>(), op, comm), name);
  }
  for (std::size_t i = 0; i < size; ++i) owner[i] = pairs[i].rank;
  if (memory == Memory::kHost) {
    for (std::size_t i = 0; i < size; ++i) out[i] = pairs[i].value;
  } else {
    T* staged = values_lease.as<T>();
    for (std::size_t i = 0; i < size; ++i) staged[i] = pairs[i].value;
    staging::copy_out(out, staged, size * sizeof(T), memory, name);
  }
}

}  // namespace

template <class T>
void allreduce_maxloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm) {
  allreduce_located(in, out, owner, count, comm, MPI_MAXLOC, "allreduce_maxloc");
}

template <class T>
void allreduce_minloc(const T* in, T* out, int* owner, std::int64_t count, MPI_Comm comm) {
  allreduce_located(in, out, owner, count, comm, MPI_MINLOC, "allreduce_minloc");
}

#define DISTOP_INSTANTIATE(T)                                                               \
  template Request isend(const T*, std::int64_t, int, int, MPI_Comm);                       \
  template Request irecv(T*, std::int64_t, int, int, MPI_Comm);                             \
  template Request iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm);                    \
  template Request ialltoallv(const T*, const int*, const int*, T*, const int*, const int*, \
                              MPI_Comm, ExchangeSchedule);                                  \
  template Request iallgatherv(T*, const int*, const int*, MPI_Comm, ExchangeSchedule);     \
  template void allgatherv(const T*, std::int64_t, T*, const int*, const int*, MPI_Comm);   \
  template void allreduce_maxloc(const T*, T*, int*, std::int64_t, MPI_Comm);               \
  template void allreduce_minloc(const T*, T*, int*, std::int64_t, MPI_Comm);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm
