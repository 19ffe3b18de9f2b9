#include "storage.hpp"

#include "distop/core/memory.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#ifdef DISTOP_SMPI
#include <smpi/smpi.h>
#endif

namespace distop::detail {

namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMinBlock = 64;
// Bytes before the data in each block: room for the shared_ptr's control block, keeping the data
// 64-byte aligned. A class's blocks hold kHeader + its size.
constexpr std::size_t kHeader = 64;
// Four size classes per power of two: a block wastes at most a quarter of what was asked for.
constexpr int kStepsPerOctave = 4;
constexpr int kClasses = 64 * kStepsPerOctave;

// The pool's limit on cached bytes: DISTOP_HOST_CACHE_MB (0 disables caching), default 1024 MiB.
// A value that is not a whole number of MiB is reported once on stderr and the default used.
std::size_t cache_limit_from_environment() {
  constexpr unsigned long long kDefaultMiB = 1024;
  constexpr unsigned long long kMaxMiB = 1ull << 40;  // far beyond any memory, no overflow below
  const char* s = std::getenv("DISTOP_HOST_CACHE_MB");
  if (s == nullptr || *s == '\0') return static_cast<std::size_t>(kDefaultMiB << 20);
  char* end = nullptr;
  errno = 0;
  const unsigned long long mib = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || *s == '-' || mib > kMaxMiB) {
    std::fprintf(stderr,
                 "distop: DISTOP_HOST_CACHE_MB='%s' is not a number of MiB (0 to %llu); using "
                 "%llu\n",
                 s, kMaxMiB, kDefaultMiB);
    return static_cast<std::size_t>(kDefaultMiB << 20);
  }
  return static_cast<std::size_t>(mib << 20);
}

struct SizeClass {
  int index;
  std::size_t bytes;
};

// The class of a request: its size rounded up to p + k p/4 (k = 1..4) for the power of two p below.
SizeClass size_class(std::size_t bytes) {
  if (bytes <= kMinBlock) return {0, kMinBlock};
  const std::size_t p = std::bit_floor(bytes - 1);  // p < bytes <= 2p
  const std::size_t step = p / kStepsPerOctave;
  const std::size_t k = (bytes - p + step - 1) / step;  // 1..4
  const int octave = std::countr_zero(p);
  return {octave * kStepsPerOctave + static_cast<int>(k) - 1, p + k * step};
}

// The lock around the pool's few instructions of bookkeeping. Uncontended (a training step
// allocates from one thread) it is an atomic exchange and a store, where std::mutex costs two
// library calls; contended, the waiter yields its core.
class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire))
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Bytes of pool blocks held by live tensors, and the most held at once (distop/core/memory.hpp).
std::atomic<std::size_t> g_in_use{0};
std::atomic<std::size_t> g_peak{0};

void count_allocation(std::size_t bytes) noexcept {
  const std::size_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

class HostPool {
 public:
  static HostPool& instance() {
    // Never destroyed: blocks may come back from tensors that outlive static destruction.
    static HostPool* pool = new HostPool;
    return *pool;
  }

  std::shared_ptr<void> allocate(std::size_t bytes) {
    const SizeClass c = size_class(bytes);
    void* block = nullptr;
    {
      std::lock_guard<SpinLock> lock(mutex_);
      auto& list = free_[static_cast<std::size_t>(c.index)];
      if (!list.empty()) {
        block = list.back();
        list.pop_back();
        cached_ -= c.bytes;
      }
    }
    if (block == nullptr) {
      // aligned_alloc takes whole multiples of the alignment (the classes below 256 bytes are not).
      const std::size_t total = (kHeader + c.bytes + kAlignment - 1) / kAlignment * kAlignment;
      block = std::aligned_alloc(kAlignment, total);
      if (block == nullptr) throw std::bad_alloc();
    }
    // The shared_ptr's control block lives in the block's header (HeaderAllocator), so a tensor
    // costs one pop from the pool and no further allocation. Its last act, once the count drops
    // to zero, is to hand the whole block back.
    count_allocation(c.bytes);
    try {
      return std::shared_ptr<void>(static_cast<std::byte*>(block) + kHeader, KeepBlock{},
                                   HeaderAllocator<char>{block, c});
    } catch (...) {
      release(block, c);
      throw;
    }
  }

  void release(void* p, SizeClass c) noexcept {
    g_in_use.fetch_sub(c.bytes, std::memory_order_relaxed);
    {
      std::lock_guard<SpinLock> lock(mutex_);
      if (cached_ + c.bytes <= limit_) {
        try {
          free_[static_cast<std::size_t>(c.index)].push_back(p);
          cached_ += c.bytes;
          return;
        } catch (...) {
          // No room to remember the block: free it below.
        }
      }
    }
    std::free(p);
  }

  void release_cached() {
    std::lock_guard<SpinLock> lock(mutex_);
    for (auto& list : free_) {
      for (void* p : list) std::free(p);
      list.clear();
      list.shrink_to_fit();
    }
    cached_ = 0;
  }

 private:
  // The data's deleter: nothing to do, the header's allocator returns the block.
  struct KeepBlock {
    void operator()(void*) const noexcept {}
  };
  // Places the shared_ptr's control block in the header of a pool block, and gives the block
  // back to the pool when the control block is freed.
  template <class U>
  struct HeaderAllocator {
    using value_type = U;
    void* block;
    SizeClass c;
    template <class V>
    HeaderAllocator(const HeaderAllocator<V>& o) noexcept  // NOLINT(google-explicit-constructor)
        : block(o.block), c(o.c) {}
    HeaderAllocator(void* b, SizeClass sc) noexcept : block(b), c(sc) {}
    U* allocate(std::size_t n) {
      static_assert(alignof(U) <= kAlignment);
      if (n * sizeof(U) > kHeader) throw std::bad_alloc();  // a control block is about 40 bytes
      return static_cast<U*>(block);
    }
    void deallocate(U*, std::size_t) noexcept { HostPool::instance().release(block, c); }
    template <class V>
    bool operator==(const HeaderAllocator<V>& o) const noexcept {
      return block == o.block;
    }
  };

  HostPool() : limit_(cache_limit_from_environment()) {}

  SpinLock mutex_;
  std::array<std::vector<void*>, kClasses> free_;
  std::size_t cached_ = 0;
  std::size_t limit_;
};

}  // namespace

#ifdef DISTOP_SMPI
namespace {
// SimGrid SMPI builds only (scripts/simulate.sh, docs/scaling.md): with DISTOP_SMPI_SHARED_BYTES=N
// (N > 0), blocks of N bytes and more come from SMPI's shared malloc, whose pages every simulated
// rank shares (their contents are then meaningless; timing runs only). Read once per privatised
// copy of the library, i.e. once per simulated rank.
std::size_t smpi_shared_threshold() {
  static const std::size_t threshold = [] {
    const char* s = std::getenv("DISTOP_SMPI_SHARED_BYTES");
    return s == nullptr ? std::size_t{0}
                        : static_cast<std::size_t>(std::strtoull(s, nullptr, 10));
  }();
  return threshold;
}
}  // namespace
#endif

std::shared_ptr<void> allocate_host_storage(std::size_t bytes) {
#ifdef DISTOP_SMPI
  const std::size_t threshold = smpi_shared_threshold();
  if (threshold > 0 && bytes >= threshold) {
    void* p = smpi_shared_malloc(bytes, __FILE__, __LINE__);
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { smpi_shared_free(q); });
  }
#endif
  return HostPool::instance().allocate(bytes);
}

void release_cached_host_storage() { HostPool::instance().release_cached(); }

}  // namespace distop::detail

namespace distop {

TensorMemory tensor_memory() noexcept {
  return {detail::g_in_use.load(std::memory_order_relaxed),
          detail::g_peak.load(std::memory_order_relaxed)};
}

void reset_peak_tensor_memory() noexcept {
  detail::g_peak.store(detail::g_in_use.load(std::memory_order_relaxed),
                       std::memory_order_relaxed);
}

}  // namespace distop
