#include "distop/comm/collectives.hpp"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/tensor.hpp"

#ifdef DISTOP_HAVE_NCCL
#include "nccl_backend.hpp"
#endif

namespace distop::comm {

namespace {

template <class T>
using Unmanaged = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using HostBuffer = Kokkos::View<T*, Kokkos::HostSpace>;

int checked_count(std::int64_t count, const char* op) {
  DISTOP_CHECK(count >= 0 && count <= INT_MAX, op, "message of ", count,
               " elements exceeds MPI's int count limit");
  return static_cast<int>(count);
}

// Host copies of device buffers, for an MPI that cannot read device memory.
template <class T>
HostBuffer<T> to_host(const T* src, std::int64_t count) {
  HostBuffer<T> h(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::staging"),
                  static_cast<std::size_t>(count));
  if (src) Kokkos::deep_copy(h, Unmanaged<const T>(src, static_cast<std::size_t>(count)));
  return h;
}
template <class T>
void from_host(const HostBuffer<T>& h, T* dst) {
  Kokkos::deep_copy(Unmanaged<T>(dst, h.extent(0)), h);
}

// Blocking collectives, or their nonblocking forms finished by a wait that yields the processor
// between tests when the node runs more ranks than it has cores (see yield_when_idle()).
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

}  // namespace

const char* device_backend() {
  if constexpr (kHostAccessible) return "mpi";
#ifdef DISTOP_HAVE_NCCL
  return "nccl";
#else
  return "mpi+staging";
#endif
}

template <class T>
void bcast(T* buf, std::int64_t count, int root, MPI_Comm comm) {
  const int n = checked_count(count, "bcast");
  if constexpr (kHostAccessible) {
    if (yield_when_idle()) {
      MPI_Request r;
      DISTOP_MPI_CHECK(MPI_Ibcast(buf, n, mpi_type<T>(), root, comm, &r), "bcast");
      finish(r, "bcast");
    } else {
      DISTOP_MPI_CHECK(MPI_Bcast(buf, n, mpi_type<T>(), root, comm), "bcast");
    }
  } else {
#ifdef DISTOP_HAVE_NCCL
    nccl::bcast(buf, count, root, comm);
#else
    auto h = to_host(buf, count);
    DISTOP_MPI_CHECK(MPI_Bcast(h.data(), n, mpi_type<T>(), root, comm), "bcast");
    from_host(h, buf);
#endif
  }
}

template <class T>
void bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count, int root,
                     MPI_Comm comm) {
  int rank = 0, size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "bcast");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "bcast");
  const bool is_root = rank == root;
  if constexpr (!kHostAccessible) {
    if (is_root) {
      bcast(const_cast<T*>(send), count, root, comm);
      if (copy_to) copy(send, copy_to, count);
    } else {
      bcast(recv, count, root, comm);
    }
    return;
  }
  const int n = checked_count(count, "bcast");
  const auto type = mpi_type<T>();
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
    if (copy_to) copy(send, copy_to, count);
    finish(r, "bcast");
    return;
  }
  T* buf = is_root ? const_cast<T*>(send) : recv;
  // From 64 KiB on, the root writes its own copy while the broadcast is in flight. A nonblocking
  // broadcast matches only nonblocking ones, so every rank takes the same form, decided from what
  // all of them know alike: the count and the (agreed) yield setting.
  const bool nonblocking =
      yield_when_idle() || static_cast<std::size_t>(count) * sizeof(T) >= std::size_t{64} << 10;
  if (nonblocking) {
    MPI_Request r;
    DISTOP_MPI_CHECK(MPI_Ibcast(buf, n, type, root, comm, &r), "bcast");
    if (is_root && copy_to) copy(send, copy_to, count);
    finish(r, "bcast");
    return;
  }
  DISTOP_MPI_CHECK(MPI_Bcast(buf, n, type, root, comm), "bcast");
  if (is_root && copy_to) copy(send, copy_to, count);
}

// A grow-only host buffer per element type, for the root of a two-rank reduction.
template <class T>
T* scratch(std::int64_t count) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < static_cast<std::size_t>(count))
    buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

template <class T>
void reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm) {
  const int n = checked_count(count, "reduce_sum");
  int rank = 0, size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reduce_sum");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "reduce_sum");
  const bool in_place = rank == root && send == nullptr;
  if constexpr (kHostAccessible) {
    if (size == 2) {
      // One message and a local sum: several times faster than MPICH's MPI_Reduce here.
      constexpr int kTag = 8;
      MPI_Request r;
      if (rank != root) {
        DISTOP_MPI_CHECK(MPI_Isend(send, n, mpi_type<T>(), root, kTag, comm, &r), "reduce_sum");
        finish(r, "reduce_sum");
        return;
      }
      T* other = scratch<T>(count);
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
      DISTOP_MPI_CHECK(MPI_Ireduce(s, recv, n, mpi_type<T>(), MPI_SUM, root, comm, &r),
                       "reduce_sum");
      finish(r, "reduce_sum");
    } else {
      DISTOP_MPI_CHECK(MPI_Reduce(s, recv, n, mpi_type<T>(), MPI_SUM, root, comm), "reduce_sum");
    }
  } else {
#ifdef DISTOP_HAVE_NCCL
    nccl::reduce_sum(in_place ? recv : send, recv, count, root, comm);
#else
    auto hs = to_host(in_place ? recv : send, count);
    HostBuffer<T> hr(Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::staging"),
                     rank == root ? static_cast<std::size_t>(count) : 0);
    DISTOP_MPI_CHECK(MPI_Reduce(hs.data(), hr.data(), n, mpi_type<T>(), MPI_SUM, root, comm),
                     "reduce_sum");
    if (rank == root) from_host(hr, recv);
#endif
  }
}

template <class T>
void allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const int n = checked_count(count, "allreduce_sum");
  if constexpr (kHostAccessible) {
    const void* s = send == recv ? MPI_IN_PLACE : send;
    if (yield_when_idle()) {
      MPI_Request r;
      DISTOP_MPI_CHECK(MPI_Iallreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm, &r),
                       "allreduce_sum");
      finish(r, "allreduce_sum");
    } else {
      DISTOP_MPI_CHECK(MPI_Allreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm), "allreduce_sum");
    }
  } else {
#ifdef DISTOP_HAVE_NCCL
    nccl::allreduce_sum(send, recv, count, comm);
#else
    auto h = to_host(send, count);
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h.data(), n, mpi_type<T>(), MPI_SUM, comm),
                     "allreduce_sum");
    from_host(h, recv);
#endif
  }
}

template <class T>
void copy(const T* src, T* dst, std::int64_t count) {
  if (count <= 0 || src == dst) return;
  if constexpr (kHostAccessible) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
    return;
  }
  Kokkos::deep_copy(Unmanaged<T>(dst, static_cast<std::size_t>(count)),
                    Unmanaged<const T>(src, static_cast<std::size_t>(count)));
}

template <class T>
void fill_zero(T* dst, std::int64_t count) {
  if (count <= 0) return;
  if constexpr (kHostAccessible) {
    std::fill(dst, dst + count, T(0));
    return;
  }
  Kokkos::deep_copy(Unmanaged<T>(dst, static_cast<std::size_t>(count)), T(0));
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

Request::Request(Request&& other) noexcept
    : kind_(other.kind_),
      request_(other.request_),
      on_complete_(std::move(other.on_complete_)),
      keep_(std::move(other.keep_)) {
  other.kind_ = Kind::kNone;
  other.request_ = MPI_REQUEST_NULL;
  other.on_complete_ = nullptr;
  other.keep_.clear();
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    abandon();
    kind_ = other.kind_;
    request_ = other.request_;
    on_complete_ = std::move(other.on_complete_);
    keep_ = std::move(other.keep_);
    other.kind_ = Kind::kNone;
    other.request_ = MPI_REQUEST_NULL;
    other.on_complete_ = nullptr;
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
  kind_ = Kind::kNone;  // from here on, MPI owns nothing of this request
  try {
    finish(request_, "Request::wait");
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

void Request::abandon() noexcept {
  if (kind_ == Kind::kNone) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  bool released = false;
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
  if (!released) bury(keep_);
  keep_.clear();
  on_complete_ = nullptr;
  kind_ = Kind::kNone;
  request_ = MPI_REQUEST_NULL;
}

template <class T>
Request isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm) {
  const int n = checked_count(count, "isend");
  MPI_Request r = MPI_REQUEST_NULL;
  if constexpr (kHostAccessible) {
    DISTOP_MPI_CHECK(MPI_Isend(buf, n, mpi_type<T>(), dest, tag, comm, &r), "isend");
    return Request(Request::Kind::kSend, r);
  } else {
    auto staged = std::make_shared<HostBuffer<T>>(to_host(buf, count));
    DISTOP_MPI_CHECK(MPI_Isend(staged->data(), n, mpi_type<T>(), dest, tag, comm, &r), "isend");
    Request request(Request::Kind::kSend, r);
    request.keep_alive(std::move(staged));
    return request;
  }
}

template <class T>
Request irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm) {
  const int n = checked_count(count, "irecv");
  MPI_Request r = MPI_REQUEST_NULL;
  if constexpr (kHostAccessible) {
    DISTOP_MPI_CHECK(MPI_Irecv(buf, n, mpi_type<T>(), source, tag, comm, &r), "irecv");
    return Request(Request::Kind::kReceive, r);
  } else {
    auto staged = std::make_shared<HostBuffer<T>>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::staging"),
        static_cast<std::size_t>(count));
    DISTOP_MPI_CHECK(MPI_Irecv(staged->data(), n, mpi_type<T>(), source, tag, comm, &r), "irecv");
    Request request(Request::Kind::kReceive, r, [h = staged.get(), buf]() { from_host(*h, buf); });
    request.keep_alive(std::move(staged));
    return request;
  }
}

template <class T>
Request iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm) {
  const int n = checked_count(count, "iallreduce_sum");
  MPI_Request r = MPI_REQUEST_NULL;
  if constexpr (kHostAccessible) {
    const void* s = send == recv ? MPI_IN_PLACE : send;
    DISTOP_MPI_CHECK(MPI_Iallreduce(s, recv, n, mpi_type<T>(), MPI_SUM, comm, &r),
                     "iallreduce_sum");
    return Request(Request::Kind::kCollective, r);
  } else {
    auto staged = std::make_shared<HostBuffer<T>>(to_host(send, count));
    DISTOP_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, staged->data(), n, mpi_type<T>(), MPI_SUM, comm, &r),
        "iallreduce_sum");
    Request request(Request::Kind::kCollective, r,
                    [h = staged.get(), recv]() { from_host(*h, recv); });
    request.keep_alive(std::move(staged));
    return request;
  }
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
  HostBuffer<T> staged;
  const T* values = in;
  if constexpr (!kHostAccessible) {
    staged = to_host(in, count);
    values = staged.data();
  }
  std::vector<ValueRank<T>> pairs(size);
  for (std::size_t i = 0; i < size; ++i) pairs[i] = {values[i], rank};
  if (yield_when_idle()) {
    MPI_Request r;
    DISTOP_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, pairs.data(), n, value_rank_type<T>(), op, comm, &r), name);
    finish(r, name);
  } else {
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, pairs.data(), n, value_rank_type<T>(), op, comm),
                     name);
  }
  for (std::size_t i = 0; i < size; ++i) owner[i] = pairs[i].rank;
  if constexpr (kHostAccessible) {
    for (std::size_t i = 0; i < size; ++i) out[i] = pairs[i].value;
  } else {
    for (std::size_t i = 0; i < size; ++i) staged(i) = pairs[i].value;
    from_host(staged, out);
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

#define DISTOP_INSTANTIATE(T)                                                 \
  template Request isend(const T*, std::int64_t, int, int, MPI_Comm);         \
  template Request irecv(T*, std::int64_t, int, int, MPI_Comm);               \
  template Request iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm);      \
  template void allreduce_maxloc(const T*, T*, int*, std::int64_t, MPI_Comm); \
  template void allreduce_minloc(const T*, T*, int*, std::int64_t, MPI_Comm);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm
