#pragma once
// Internal: whether the host fast paths of the kernels (host/fast_path.hpp) are compiled: a build
// whose kernels run on the host, with DISTOP_ENABLE_HOST_KERNELS=ON. Only the fast-path layer
// tests it; whether they run is kernels::host_kernels_enabled() (also false under the environment
// variable DISTOP_HOST_KERNELS=off). The portable kernels' settings per execution space are in
// tuning.hpp.

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
