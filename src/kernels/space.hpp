#pragma once
// Internal: whether distop's kernels run on the host. Host kernels give each work item a run of
// contiguous entries (a row), decoded from the work index once, so that the inner loops are plain
// strided loops; device kernels give each thread one entry, so that neighbouring threads touch
// neighbouring memory.

#include <type_traits>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// DISTOP_HOST_KERNELS is the build option DISTOP_ENABLE_HOST_KERNELS (src/CMakeLists.txt): 0 runs
// the device forms on the host as well.
#ifndef DISTOP_HOST_KERNELS
#define DISTOP_HOST_KERNELS 1
#endif
inline constexpr bool kHostKernels =
    DISTOP_HOST_KERNELS != 0 && std::is_same_v<typename ExecSpace::memory_space, Kokkos::HostSpace>;

}  // namespace distop::kernels
