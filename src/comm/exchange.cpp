#include "distop/comm/exchange.hpp"

#include <sched.h>

#include "backends.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"
#include "staging.hpp"

#ifdef DISTOP_HAVE_NCCL
#include "nccl_backend.hpp"
#endif

namespace distop::comm {

template <class T>
Exchange<T>::~Exchange() {
  // Unwaited NCCL messages were never posted; MPI ones complete here (unchecked: a destructor
  // must not throw, and a failed wait leaves nothing to undo).
  if (!requests_.empty())
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
}

template <class T>
void Exchange<T>::post(T* buffer, std::int64_t count, int peer, bool send) {
  const int n = checked_count(count, "Exchange");
  const Memory memory = memory_of(buffer);
  const Backend b = backend(memory);
  if (b == Backend::kNccl) {
#ifdef DISTOP_HAVE_NCCL
    device_.push_back({buffer, count, peer, send});
    return;
#else
    throw Error("Exchange", "the nccl backend is not in this build");
#endif
  }
  T* target = buffer;
  if (b == Backend::kStaging) {
    const auto bytes = static_cast<std::size_t>(count) * sizeof(T);
    auto lease = std::make_shared<staging::Lease>(bytes);
    if (send) staging::copy_in(lease->data(), buffer, bytes, memory, "Exchange");
    target = lease->as<T>();
    staged_.push_back({send ? nullptr : buffer, count, memory, std::move(lease)});
  } else if (b == Backend::kCudaAwareMpi && !producer_synchronized_) {
    CudaAwareMpiBackend::wait_for_producer("Exchange");
    producer_synchronized_ = true;
  }
  MPI_Request r;
  if (send) {
    DISTOP_MPI_CHECK(MPI_Isend(target, n, mpi_type<T>(), peer, tag_, comm_, &r), "Exchange");
  } else {
    DISTOP_MPI_CHECK(MPI_Irecv(target, n, mpi_type<T>(), peer, tag_, comm_, &r), "Exchange");
  }
  requests_.push_back(r);
}

template <class T>
void Exchange<T>::recv(T* buffer, std::int64_t count, int source) {
  post(buffer, count, source, false);
}

template <class T>
void Exchange<T>::send(const T* buffer, std::int64_t count, int dest) {
  post(const_cast<T*>(buffer), count, dest, true);  // a send only reads it
}

template <class T>
void Exchange<T>::wait() {
#ifdef DISTOP_HAVE_NCCL
  if (!device_.empty()) {
    std::vector<nccl::Message> messages;
    messages.reserve(device_.size());
    for (const auto& m : device_) messages.push_back({m.buffer, m.count, m.peer, m.send});
    device_.clear();
    nccl::exchange<T>(messages, comm_);
  }
#endif
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
    DISTOP_MPI_CHECK(
        MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
        "Exchange");
  }
  requests_.clear();
  for (auto& s : staged_) {
    if (!s.target) continue;
    auto* lease = static_cast<staging::Lease*>(s.buffer.get());
    staging::copy_out(s.target, lease->data(), static_cast<std::size_t>(s.count) * sizeof(T),
                      s.memory, "Exchange");
  }
  staged_.clear();
  producer_synchronized_ = false;
}

template class Exchange<float>;
template class Exchange<double>;

}  // namespace distop::comm
