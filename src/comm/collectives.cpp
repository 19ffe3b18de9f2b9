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
  if (complete_) return false;  // NCCL: completed by wait()
  int done = 0;
  DISTOP_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "Request::test");
  if (!done) return false;
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

template <class T>
Request ialltoallv(const T* send, const int* send_counts, const int* send_displs, T* recv,
                   const int* recv_counts, const int* recv_displs, MPI_Comm comm) {
  const Memory memory = memory_of(send ? static_cast<const void*>(send) : recv);
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
Request iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm) {
  const Memory memory = memory_of(buf);
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
                              MPI_Comm);                                                    \
  template Request iallgatherv(T*, const int*, const int*, MPI_Comm);                       \
  template void allgatherv(const T*, std::int64_t, T*, const int*, const int*, MPI_Comm);   \
  template void allreduce_maxloc(const T*, T*, int*, std::int64_t, MPI_Comm);               \
  template void allreduce_minloc(const T*, T*, int*, std::int64_t, MPI_Comm);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm
