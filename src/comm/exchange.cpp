#include "distop/comm/exchange.hpp"

#include <sched.h>

#include <climits>

#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"

namespace distop::comm {

namespace {
int checked(std::int64_t count) {
  DISTOP_CHECK(count >= 0 && count <= INT_MAX, "Exchange", "message of ", count,
               " elements exceeds MPI's int count limit");
  return static_cast<int>(count);
}

template <class T>
using Unmanaged = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using HostUnmanaged = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

template <class T>
Exchange<T>::~Exchange() {
  if (!requests_.empty()) MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(),
                                      MPI_STATUSES_IGNORE);
}

template <class T>
void Exchange<T>::recv(T* buffer, std::int64_t count, int source) {
  MPI_Request r;
  T* target = buffer;
  if constexpr (!kHostAccessible) {
    staged_.push_back({buffer, std::vector<T>(static_cast<std::size_t>(count))});
    target = staged_.back().host.data();
  }
  DISTOP_MPI_CHECK(MPI_Irecv(target, checked(count), mpi_type<T>(), source, tag_, comm_, &r),
                   "Exchange");
  requests_.push_back(r);
}

template <class T>
void Exchange<T>::send(const T* buffer, std::int64_t count, int dest) {
  MPI_Request r;
  const T* source = buffer;
  if constexpr (!kHostAccessible) {
    staged_.push_back({nullptr, std::vector<T>(static_cast<std::size_t>(count))});
    Kokkos::deep_copy(HostUnmanaged<T>(staged_.back().host.data(), static_cast<std::size_t>(count)),
                      Unmanaged<const T>(buffer, static_cast<std::size_t>(count)));
    source = staged_.back().host.data();
  }
  DISTOP_MPI_CHECK(MPI_Isend(source, checked(count), mpi_type<T>(), dest, tag_, comm_, &r),
                   "Exchange");
  requests_.push_back(r);
}

template <class T>
void Exchange<T>::wait() {
  WatchedWait watch("Exchange::wait", comm_);  // the hang watchdog sees the loop as one wait
  if (yield_when_idle()) {
    for (auto& r : requests_) {
      int done = 0;
      while (!done) {
        DISTOP_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "Exchange");
        if (!done) sched_yield();
      }
    }
  } else if (!requests_.empty()) {
    DISTOP_MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(),
                                 MPI_STATUSES_IGNORE),
                     "Exchange");
  }
  requests_.clear();
  if constexpr (!kHostAccessible) {
    for (auto& s : staged_)
      if (s.device)
        Kokkos::deep_copy(Unmanaged<T>(s.device, s.host.size()),
                          HostUnmanaged<const T>(s.host.data(), s.host.size()));
  }
  staged_.clear();
}

template class Exchange<float>;
template class Exchange<double>;

}  // namespace distop::comm
