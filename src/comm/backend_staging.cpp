// StagingBackend: MPI on reused host staging buffers.
#include <algorithm>
#include <memory>
#include <vector>

#include "backends.hpp"
#include "distop/comm/mpi.hpp"
#include "staging.hpp"

namespace distop::comm {

namespace {
template <class T>
std::size_t bytes_of(std::int64_t count) {
  return static_cast<std::size_t>(count > 0 ? count : 0) * sizeof(T);
}

// The entries [start, start + length) that the nonempty blocks (counts[q] entries at displs[q], q
// < size) cover, as maximal runs: adjacent blocks (the usual layout) make one run, so that one
// copy moves them between the caller's buffer and the staging buffer.
struct Run {
  std::int64_t start = 0;
  std::int64_t length = 0;
};
std::vector<Run> runs_of(const int* counts, const int* displs, int size) {
  std::vector<Run> blocks;
  for (int q = 0; q < size; ++q)
    if (counts[q] > 0) blocks.push_back(Run{displs[q], counts[q]});
  std::sort(blocks.begin(), blocks.end(),
            [](const Run& a, const Run& b) { return a.start < b.start; });
  std::vector<Run> runs;
  for (const Run& b : blocks) {
    if (!runs.empty() && b.start <= runs.back().start + runs.back().length) {
      runs.back().length = std::max(runs.back().length, b.start + b.length - runs.back().start);
    } else {
      runs.push_back(b);
    }
  }
  return runs;
}

// One past the last entry the runs cover.
std::int64_t extent_of(const std::vector<Run>& runs) {
  std::int64_t end = 0;
  for (const Run& r : runs) end = std::max(end, r.start + r.length);
  return end;
}

int size_of(MPI_Comm comm, const char* op) {
  int size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), op);
  return size;
}
}  // namespace

template <class T>
void StagingBackend::bcast(T* buf, std::int64_t count, int root, MPI_Comm comm, Memory memory) {
  checked_count(count, "bcast");
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "bcast");
  const auto bytes = bytes_of<T>(count);
  staging::Lease h(bytes);
  if (rank == root) staging::copy_in(h.data(), buf, bytes, memory, "bcast");
  MpiBackend::bcast(h.as<T>(), count, root, comm);
  if (rank != root) staging::copy_out(buf, h.data(), bytes, memory, "bcast");
}

template <class T>
void StagingBackend::bcast_with_copy(const T* send, T* copy_to, T* recv, std::int64_t count,
                                     int root, MPI_Comm comm, Memory memory) {
  checked_count(count, "bcast");
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "bcast");
  const auto bytes = bytes_of<T>(count);
  staging::Lease h(bytes);
  if (rank == root) {
    staging::copy_in(h.data(), send, bytes, memory, "bcast");
    // The same messages as MpiBackend's (its form depends on the count and the group only); the
    // root's own copy comes from the staging buffer.
    MpiBackend::bcast_with_copy<T>(h.as<T>(), nullptr, nullptr, count, root, comm);
    if (copy_to) staging::copy_out(copy_to, h.data(), bytes, memory, "bcast");
  } else {
    MpiBackend::bcast_with_copy<T>(nullptr, nullptr, h.as<T>(), count, root, comm);
    staging::copy_out(recv, h.data(), bytes, memory, "bcast");
  }
}

template <class T>
void StagingBackend::reduce_sum(const T* send, T* recv, std::int64_t count, int root, MPI_Comm comm,
                                Memory memory) {
  checked_count(count, "reduce_sum");
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "reduce_sum");
  const bool is_root = rank == root;
  const auto bytes = bytes_of<T>(count);
  staging::Lease hs(bytes);
  staging::copy_in(hs.data(), is_root && send == nullptr ? recv : send, bytes, memory,
                   "reduce_sum");
  staging::Lease hr(is_root ? bytes : 0);
  MpiBackend::reduce_sum(hs.as<T>(), hr.as<T>(), count, root, comm);
  if (is_root) staging::copy_out(recv, hr.data(), bytes, memory, "reduce_sum");
}

template <class T>
void StagingBackend::allreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm,
                                   Memory memory) {
  checked_count(count, "allreduce_sum");
  const auto bytes = bytes_of<T>(count);
  staging::Lease h(bytes);
  staging::copy_in(h.data(), send, bytes, memory, "allreduce_sum");
  MpiBackend::allreduce_sum(h.as<T>(), h.as<T>(), count, comm);
  staging::copy_out(recv, h.data(), bytes, memory, "allreduce_sum");
}

// The nonblocking forms hold their lease in the request (given back once the transfer is
// complete, or never, if it is abandoned while MPI may still use the buffer).

template <class T>
Request StagingBackend::isend(const T* buf, std::int64_t count, int dest, int tag, MPI_Comm comm,
                              Memory memory) {
  checked_count(count, "isend");
  const auto bytes = bytes_of<T>(count);
  auto h = std::make_shared<staging::Lease>(bytes);
  staging::copy_in(h->data(), buf, bytes, memory, "isend");
  Request request = MpiBackend::isend(h->template as<const T>(), count, dest, tag, comm);
  request.keep_alive(std::move(h));
  return request;
}

template <class T>
Request StagingBackend::irecv(T* buf, std::int64_t count, int source, int tag, MPI_Comm comm,
                              Memory memory) {
  checked_count(count, "irecv");
  const auto bytes = bytes_of<T>(count);
  auto h = std::make_shared<staging::Lease>(bytes);
  Request posted = MpiBackend::irecv(h->template as<T>(), count, source, tag, comm);
  Request request =
      Request::with_completion(std::move(posted), [staged = h.get(), buf, bytes, memory] {
        staging::copy_out(buf, staged->data(), bytes, memory, "irecv");
      });
  request.keep_alive(std::move(h));
  return request;
}

template <class T>
Request StagingBackend::iallreduce_sum(const T* send, T* recv, std::int64_t count, MPI_Comm comm,
                                       Memory memory) {
  checked_count(count, "iallreduce_sum");
  const auto bytes = bytes_of<T>(count);
  auto h = std::make_shared<staging::Lease>(bytes);
  staging::copy_in(h->data(), send, bytes, memory, "iallreduce_sum");
  Request posted =
      MpiBackend::iallreduce_sum(h->template as<T>(), h->template as<T>(), count, comm);
  Request request =
      Request::with_completion(std::move(posted), [staged = h.get(), recv, bytes, memory] {
        staging::copy_out(recv, staged->data(), bytes, memory, "iallreduce_sum");
      });
  request.keep_alive(std::move(h));
  return request;
}

// Staging buffers as large as the blocks' extent, the blocks at the caller's displacements (so the
// count and displacement arrays serve MPI unchanged); only the blocks are copied.
template <class T>
Request StagingBackend::ialltoallv(const T* send, const int* send_counts, const int* send_displs,
                                   T* recv, const int* recv_counts, const int* recv_displs,
                                   MPI_Comm comm, Memory memory) {
  const int size = size_of(comm, "ialltoallv");
  const auto send_runs = runs_of(send_counts, send_displs, size);
  const auto recv_runs = runs_of(recv_counts, recv_displs, size);
  auto hs = std::make_shared<staging::Lease>(bytes_of<T>(extent_of(send_runs)));
  auto hr = std::make_shared<staging::Lease>(bytes_of<T>(extent_of(recv_runs)));
  for (const Run& run : send_runs)
    staging::copy_in(hs->template as<T>() + run.start, send + run.start, bytes_of<T>(run.length),
                     memory, "ialltoallv");
  Request posted = MpiBackend::ialltoallv(hs->template as<const T>(), send_counts, send_displs,
                                          hr->template as<T>(), recv_counts, recv_displs, comm);
  Request request =
      Request::with_completion(std::move(posted), [staged = hr.get(), recv, recv_runs, memory] {
        for (const Run& run : recv_runs)
          staging::copy_out(recv + run.start, staged->template as<const T>() + run.start,
                            bytes_of<T>(run.length), memory, "ialltoallv");
      });
  request.keep_alive(std::move(hs));
  request.keep_alive(std::move(hr));
  return request;
}

template <class T>
Request StagingBackend::iallgatherv(T* buf, const int* counts, const int* displs, MPI_Comm comm,
                                    Memory memory) {
  const int size = size_of(comm, "iallgatherv");
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "iallgatherv");
  const auto runs = runs_of(counts, displs, size);
  auto h = std::make_shared<staging::Lease>(bytes_of<T>(extent_of(runs)));
  if (counts[rank] > 0)
    staging::copy_in(h->template as<T>() + displs[rank], buf + displs[rank],
                     bytes_of<T>(counts[rank]), memory, "iallgatherv");
  Request posted = MpiBackend::iallgatherv(h->template as<T>(), counts, displs, comm);
  Request request =
      Request::with_completion(std::move(posted), [staged = h.get(), buf, runs, memory] {
        for (const Run& run : runs)
          staging::copy_out(buf + run.start, staged->template as<const T>() + run.start,
                            bytes_of<T>(run.length), memory, "iallgatherv");
      });
  request.keep_alive(std::move(h));
  return request;
}

#define DISTOP_INSTANTIATE(T)                                                                    \
  template void StagingBackend::bcast(T*, std::int64_t, int, MPI_Comm, Memory);                  \
  template void StagingBackend::bcast_with_copy(const T*, T*, T*, std::int64_t, int, MPI_Comm,   \
                                                Memory);                                         \
  template void StagingBackend::reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm, Memory);   \
  template void StagingBackend::allreduce_sum(const T*, T*, std::int64_t, MPI_Comm, Memory);     \
  template Request StagingBackend::isend(const T*, std::int64_t, int, int, MPI_Comm, Memory);    \
  template Request StagingBackend::irecv(T*, std::int64_t, int, int, MPI_Comm, Memory);          \
  template Request StagingBackend::iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm, Memory); \
  template Request StagingBackend::ialltoallv(const T*, const int*, const int*, T*, const int*,  \
                                              const int*, MPI_Comm, Memory);                     \
  template Request StagingBackend::iallgatherv(T*, const int*, const int*, MPI_Comm, Memory);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm
