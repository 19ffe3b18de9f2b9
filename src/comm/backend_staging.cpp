// StagingBackend: MPI on reused host staging buffers.
#include <memory>

#include "backends.hpp"
#include "distop/comm/mpi.hpp"
#include "staging.hpp"

namespace distop::comm {

namespace {
template <class T>
std::size_t bytes_of(std::int64_t count) {
  return static_cast<std::size_t>(count > 0 ? count : 0) * sizeof(T);
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

#define DISTOP_INSTANTIATE(T)                                                                  \
  template void StagingBackend::bcast(T*, std::int64_t, int, MPI_Comm, Memory);                \
  template void StagingBackend::bcast_with_copy(const T*, T*, T*, std::int64_t, int, MPI_Comm, \
                                                Memory);                                       \
  template void StagingBackend::reduce_sum(const T*, T*, std::int64_t, int, MPI_Comm, Memory); \
  template void StagingBackend::allreduce_sum(const T*, T*, std::int64_t, MPI_Comm, Memory);   \
  template Request StagingBackend::isend(const T*, std::int64_t, int, int, MPI_Comm, Memory);  \
  template Request StagingBackend::irecv(T*, std::int64_t, int, int, MPI_Comm, Memory);        \
  template Request StagingBackend::iallreduce_sum(const T*, T*, std::int64_t, MPI_Comm, Memory);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::comm
