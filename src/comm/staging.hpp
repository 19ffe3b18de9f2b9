#pragma once
// The staging backend's host buffers (internal): a pool of grow-only buffers leased per transfer.
//
// Staging buffers are kept apart from the library's scratch pool (core/scratch.hpp) because in
// CUDA builds they are page-locked (cudaMallocHost), which is slow to allocate and limited, and
// only transfers between device and host gain from it.

#include <cstddef>
#include <utility>

#include "distop/comm/backend.hpp"

namespace distop::comm::staging {

struct Slot;

// A staging buffer leased for one transfer; move-only, given back to the pool on destruction. A
// lease of zero bytes holds no buffer (data() is null: MPI needs none for an empty message).
class Lease {
 public:
  Lease() noexcept = default;
  explicit Lease(std::size_t bytes);
  ~Lease();
  Lease(Lease&& o) noexcept : slot_(std::exchange(o.slot_, nullptr)), data_(o.data_) {}
  Lease& operator=(Lease&& o) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  Slot* slot_ = nullptr;
  void* data_ = nullptr;
};

// Copies `bytes` between a caller's buffer in `memory` and a staging buffer: a memcpy for host
// memory; for device memory a copy on the producer stream, complete when these return.
void copy_in(void* staging, const void* src, std::size_t bytes, Memory memory, const char* op);
void copy_out(void* dst, const void* staging, std::size_t bytes, Memory memory, const char* op);

}  // namespace distop::comm::staging
