#pragma once
// Internal to distop: the library's one pool of scratch memory.
//
// Kernels and communication need temporary buffers (im2col matrices, padded planes, a received
// operand to sum into), used within one call and wanted again, at the same sizes, on the next
// call. Every such buffer is leased from this pool; none is allocated per call. (Tensor storage is
// a different thing: its blocks live as long as the tensors that share them, see storage.hpp.)
//
// Use:
//   detail::Scratch<float> buf(count);                            // default memory space
//   detail::Scratch<float> host(count, detail::ScratchSpace::kHost);  // host memory
//   float* p = buf.data();   // count elements, contents undefined, 64-byte aligned
//   ...                      // the buffer is given back when `buf` is destroyed
//
// Contract:
// - A lease is exclusive: no other lease sees its block until it is destroyed, so threads may
//   lease concurrently (the pool takes a lock for a few instructions per lease and give-back).
// - ScratchSpace::kDevice is Kokkos' default memory space (MemSpace in distop/core/tensor.hpp);
//   ScratchSpace::kHost is host memory. In a host build the two are the same pool.
// - Device blocks are reused by the next lease as soon as they are given back, without a fence.
//   Work enqueued on the default execution space instance is ordered after the earlier work on
//   it, so kernels need nothing more; a user that reads or writes a device block from another
//   stream (NCCL, a second execution space instance) must wait for that work before the lease
//   ends.
// - A request is served by the smallest cached block of its space that holds it; when none does,
//   the largest cached block (too small) is freed and a new block allocated, so a pool whose
//   requests grow replaces its blocks instead of keeping every size it ever saw. Cached blocks
//   are kept until release_cached_scratch() (called by distop::Environment at shutdown) or, for
//   device blocks, Kokkos::finalize.
// - Zero-byte requests get a valid, distinct 64-byte block. Allocation failure throws
//   std::bad_alloc (host) or Kokkos' allocation error (device).
// - A lease must end before Kokkos::finalize if it is in device memory (device blocks given
//   back after finalize are not freed: there is no Kokkos left to free them).

#include <cstddef>
#include <cstdint>
#include <utility>

namespace distop::detail {

enum class ScratchSpace { kDevice, kHost };

// A leased block of raw bytes; move-only, given back to the pool on destruction.
class ScratchLease {
 public:
  ScratchLease() noexcept = default;
  // At least `bytes` bytes (contents undefined, 64-byte aligned) in `space`.
  explicit ScratchLease(std::size_t bytes, ScratchSpace space = ScratchSpace::kDevice);
  ~ScratchLease();
  ScratchLease(ScratchLease&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        capacity_(std::exchange(o.capacity_, 0)),
        space_(o.space_) {}
  ScratchLease& operator=(ScratchLease&& o) noexcept {
    if (this != &o) {
      give_back();
      data_ = std::exchange(o.data_, nullptr);
      capacity_ = std::exchange(o.capacity_, 0);
      space_ = o.space_;
    }
    return *this;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  void* data() const noexcept { return data_; }
  // The block's size: at least the bytes asked for.
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  void give_back() noexcept;

  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  ScratchSpace space_ = ScratchSpace::kDevice;
};

// A leased buffer of `count` elements of T (trivially constructible types; nothing is constructed
// or destroyed), given back on destruction. A negative count is treated as zero.
template <class T>
class Scratch {
 public:
  Scratch() noexcept = default;  // no buffer: data() is null
  explicit Scratch(std::int64_t count, ScratchSpace space = ScratchSpace::kDevice)
      : lease_(static_cast<std::size_t>(count > 0 ? count : 0) * sizeof(T), space) {}
  T* data() const noexcept { return static_cast<T*>(lease_.data()); }

 private:
  ScratchLease lease_;
};

// Frees every cached host block, and every cached device block while Kokkos is initialized.
// Leases in use are unaffected; their blocks come back to the pool as usual.
void release_cached_scratch();

}  // namespace distop::detail
