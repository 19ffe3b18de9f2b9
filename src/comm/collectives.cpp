#include "distop/comm/collectives.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

#include "distop/comm/mpi.hpp"
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

namespace {
int yield_setting = -1;  // -1: not decided yet
}

void decide_yield_when_idle(MPI_Comm world) {
  if (const char* v = std::getenv("DISTOP_YIELD_WHEN_IDLE")) {
    yield_setting = std::string(v) == "1" ? 1 : 0;
    return;
  }
  int local = 1;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  const auto cores = std::thread::hardware_concurrency();
  yield_setting = cores > 0 && static_cast<unsigned>(local) > cores ? 1 : 0;
}

bool yield_when_idle() {
  if (yield_setting < 0) {
    // Without an Environment: what the launcher says (MPICH's hydra), with no messages, since
    // this may run on a subset of the ranks.
    int local = 1;
    if (const char* v = std::getenv("MPI_LOCALNRANKS")) local = std::atoi(v);
    if (const char* v = std::getenv("DISTOP_YIELD_WHEN_IDLE")) {
      yield_setting = std::string(v) == "1" ? 1 : 0;
    } else {
      const auto cores = std::thread::hardware_concurrency();
      yield_setting = cores > 0 && static_cast<unsigned>(local) > cores ? 1 : 0;
    }
  }
  return yield_setting == 1;
}

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
  const bool overlap = is_root && copy_to &&
                       static_cast<std::size_t>(count) * sizeof(T) >= std::size_t{64} << 10;
  if (overlap || yield_when_idle()) {
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
  if (buffer.size() < static_cast<std::size_t>(count)) buffer.resize(static_cast<std::size_t>(count));
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
