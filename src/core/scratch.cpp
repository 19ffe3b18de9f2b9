#include "scratch.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "distop/core/tensor.hpp"

namespace distop::detail {

namespace {

constexpr std::size_t kAlignment = 64;

// Whether the default memory space is plain host memory: then ScratchSpace::kDevice shares the
// host pool.
constexpr bool kDeviceIsHost = std::is_same_v<MemSpace, Kokkos::HostSpace>;

struct Block {
  void* data;
  std::size_t bytes;
};

// The cached blocks of one memory space, with how to allocate and free them.
class Pool {
 public:
  explicit Pool(bool device) : device_(device) {}

  Block acquire(std::size_t bytes) {
    bytes = std::max<std::size_t>((bytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
    void* drop = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (device_ && !hook_registered_) {
        Kokkos::push_finalize_hook([this] { finalize(); });
        hook_registered_ = true;
      }
      std::size_t best = free_.size();
      std::size_t largest = free_.size();
      for (std::size_t i = 0; i < free_.size(); ++i) {
        const std::size_t b = free_[i].bytes;
        if (b >= bytes && (best == free_.size() || b < free_[best].bytes)) best = i;
        if (largest == free_.size() || b > free_[largest].bytes) largest = i;
      }
      if (best != free_.size()) {
        const Block found = free_[best];
        free_[best] = free_.back();
        free_.pop_back();
        return found;
      }
      // None fits: the largest is too small for this request; replace it by a new block.
      if (largest != free_.size()) {
        drop = free_[largest].data;
        free_[largest] = free_.back();
        free_.pop_back();
      }
    }
    if (drop != nullptr) deallocate(drop);
    return Block{allocate(bytes), bytes};
  }

  void give_back(Block b) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!device_ || hook_registered_) {
        try {
          free_.push_back(b);
          return;
        } catch (...) {
          // No room to remember the block: free it below.
        }
      } else {
        return;  // device memory after Kokkos::finalize: nothing can free it any more
      }
    }
    deallocate(b.data);
  }

  void release_cached() {
    std::vector<Block> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (device_ && !Kokkos::is_initialized()) return;
      blocks.swap(free_);
    }
    for (const Block& b : blocks) deallocate(b.data);
  }

 private:
  void* allocate(std::size_t bytes) {
    if (device_) return Kokkos::kokkos_malloc<MemSpace>("distop::scratch", bytes);
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p) noexcept {
    if (device_)
      Kokkos::kokkos_free<MemSpace>(p);
    else
      std::free(p);
  }
  // Kokkos is about to finalize: free the cached device blocks while it still can.
  void finalize() {
    std::vector<Block> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      hook_registered_ = false;
    }
    for (const Block& b : blocks) deallocate(b.data);
  }

  const bool device_;
  std::mutex mutex_;
  std::vector<Block> free_;
  bool hook_registered_ = false;
};

// Never destroyed: leases may end during static destruction.
Pool& host_pool() {
  static Pool* pool = new Pool(false);
  return *pool;
}
Pool& device_pool() {
  static Pool* pool = new Pool(true);
  return *pool;
}
Pool& pool_of(ScratchSpace space) {
  if (kDeviceIsHost || space == ScratchSpace::kHost) return host_pool();
  return device_pool();
}

}  // namespace

ScratchLease::ScratchLease(std::size_t bytes, ScratchSpace space) : space_(space) {
  const Block b = pool_of(space).acquire(bytes);
  data_ = b.data;
  capacity_ = b.bytes;
}

ScratchLease::~ScratchLease() { give_back(); }

void ScratchLease::give_back() noexcept {
  if (data_ == nullptr) return;
  pool_of(space_).give_back(Block{data_, capacity_});
  data_ = nullptr;
  capacity_ = 0;
}

void release_cached_scratch() {
  host_pool().release_cached();
  if constexpr (!kDeviceIsHost) device_pool().release_cached();
}

}  // namespace distop::detail
