#pragma once
// Internal to distop: the host memory behind Tensor storage, recycled between tensors.
//
// A training step allocates the same outputs and gradients step after step. Each fresh Kokkos
// View costs an allocation record, a label copy and the tools' hooks (about 0.3 us), and glibc
// may hand freed memory back to the system only to page-fault it in again on the next step. The
// pool keeps freed blocks in size classes (four per power of two, at least 64 bytes, 64-byte
// aligned) and hands them out again: an allocation is then a lock and a pop. The shared_ptr's
// control block lives in a header at the start of each block, so nothing else is allocated.
//
// Only host memory is pooled. A device build keeps Kokkos' managed Views, whose release orders
// itself after the kernels still using them.

#include <cstddef>
#include <memory>

namespace distop::detail {

// A block of at least `bytes` bytes, 64-byte aligned, whose contents are undefined; the block goes
// back to the pool when the last copy of the pointer dies. Throws std::bad_alloc when the system
// has no memory left.
std::shared_ptr<void> allocate_host_storage(std::size_t bytes);

// Frees every cached block (blocks in use are unaffected and return to the pool later).
void release_cached_host_storage();

}  // namespace distop::detail
