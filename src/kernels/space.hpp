#pragma once
// Internal: whether distop's kernels run on the host. Host kernels give each work item a run of
// contiguous entries (a row), decoded from the work index once, so that the inner loops are plain
// strided loops; device kernels give each thread one entry, so that neighbouring threads touch
// neighbouring memory.

#include <type_traits>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

inline constexpr bool kHostKernels =
    std::is_same_v<typename ExecSpace::memory_space, Kokkos::HostSpace>;

}  // namespace distop::kernels
