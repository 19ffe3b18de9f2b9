#include "staging.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

#ifdef DISTOP_HAVE_CUDA
#include "device.hpp"
#endif

namespace distop::comm::staging {

struct Slot {
  void* data = nullptr;
  std::size_t capacity = 0;
  bool pinned = false;
  bool in_use = false;
};

namespace {

// Buffers grow to whole pages, so that sizes that differ by a few elements share one buffer.
constexpr std::size_t kGranule = 4096;

class Pool {
 public:
  Slot* acquire(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest free buffer that holds the request.
    Slot* best = nullptr;
    Slot* largest_free = nullptr;
    for (auto& s : slots_) {
      if (s->in_use) continue;
      if (s->capacity >= bytes && (!best || s->capacity < best->capacity)) best = s.get();
      if (!largest_free || s->capacity > largest_free->capacity) largest_free = s.get();
    }
    if (!best) {
      // None holds it: grow the largest free buffer (so that a program whose messages grow keeps
      // as many buffers as it has transfers in flight, not one per size it ever sent), or add
      // one when every buffer is in use.
      best = largest_free;
      if (!best) {
        slots_.push_back(std::make_unique<Slot>());
        best = slots_.back().get();
      }
      const std::size_t capacity = (bytes + kGranule - 1) / kGranule * kGranule;
      release(*best);
      allocate(*best, capacity);
      ++growths_;
    }
    best->in_use = true;
    return best;
  }

  void give_back(Slot* slot) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    slot->in_use = false;
  }

  StagingStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    StagingStats s;
    s.growths = growths_;
    for (auto& slot : slots_) {
      if (!slot->data) continue;
      ++s.buffers;
      s.bytes += static_cast<std::int64_t>(slot->capacity);
      s.pinned = s.pinned || slot->pinned;
    }
    return s;
  }

 private:
  static void allocate(Slot& slot, std::size_t capacity) {
#ifdef DISTOP_HAVE_CUDA
    // Pinned memory only pays where device memory is staged through it.
    if (!kHostAccessible || device::present()) {
      slot.data = device::alloc_pinned(capacity);
      if (slot.data) {
        slot.pinned = true;
        slot.capacity = capacity;
        return;
      }
    }
#endif
    slot.data = std::aligned_alloc(64, capacity);
    if (!slot.data) throw std::bad_alloc();
    slot.pinned = false;
    slot.capacity = capacity;
  }
  static void release(Slot& slot) noexcept {
    if (!slot.data) return;
#ifdef DISTOP_HAVE_CUDA
    if (slot.pinned)
      device::free_pinned(slot.data);
    else
#endif
      std::free(slot.data);
    slot.data = nullptr;
    slot.capacity = 0;
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::int64_t growths_ = 0;
};

// Never destroyed: leases held by transfers abandoned unfinished may outlive static destruction,
// and pinned memory cannot be freed once the CUDA runtime has shut down.
Pool& pool() {
  static auto* p = new Pool();
  return *p;
}

}  // namespace

Lease::Lease(std::size_t bytes) {
  if (bytes == 0) return;
  slot_ = pool().acquire(bytes);
  data_ = slot_->data;
}

Lease::~Lease() {
  if (slot_) pool().give_back(slot_);
}

Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (slot_) pool().give_back(slot_);
    slot_ = std::exchange(o.slot_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

void copy_in(void* staging, const void* src, std::size_t bytes, Memory memory, const char* op) {
  if (bytes == 0) return;
  if (memory == Memory::kHost) {
    std::memcpy(staging, src, bytes);
    return;
  }
#ifdef DISTOP_HAVE_CUDA
  device::copy_to_host(staging, src, bytes, device::producer_stream(), op);
#else
  // A device Kokkos without CUDA: a copy on the default instance, waited for on that instance.
  (void)op;
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(ExecSpace(), HostBytes(static_cast<char*>(staging), bytes),
                    Bytes(static_cast<char*>(const_cast<void*>(src)), bytes));
  ExecSpace().fence();
#endif
}

void copy_out(void* dst, const void* staging, std::size_t bytes, Memory memory, const char* op) {
  if (bytes == 0) return;
  if (memory == Memory::kHost) {
    std::memcpy(dst, staging, bytes);
    return;
  }
#ifdef DISTOP_HAVE_CUDA
  device::copy_to_device(dst, staging, bytes, device::producer_stream(), op);
#else
  (void)op;
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(ExecSpace(), Bytes(static_cast<char*>(dst), bytes),
                    HostBytes(static_cast<char*>(const_cast<void*>(staging)), bytes));
  ExecSpace().fence();
#endif
}

}  // namespace distop::comm::staging

namespace distop::comm {

StagingStats staging_stats() { return staging::pool().stats(); }

}  // namespace distop::comm
