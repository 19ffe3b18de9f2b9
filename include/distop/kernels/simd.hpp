#pragma once
// Which vector instructions distop's hand-vectorised host kernels use on this CPU.

namespace distop::kernels {

// The widest vectors the hand-vectorised host kernels (the direct convolutions, the 2-wide max
// pooling) use here, in bytes: 64 (AVX-512), 32 (AVX2 with FMA), or 0 where there are none (not
// x86-64, an older CPU, or a device build's kernels), after the cap below. Detected once, at the
// first call. Where a kernel has no form for the width found, the portable kernels run instead.
int host_simd_bytes();
// Whether this build runs the host fast paths of the kernels (src/kernels/host/: the
// hand-vectorised and host-only scalar forms): the build option DISTOP_ENABLE_HOST_KERNELS (ON by
// default) in a build whose kernels run on the host. False in a device build, and where the
// option is OFF: then the portable Kokkos kernels, the ones a GPU runs, run on the host too, and
// host_simd_bytes() is 0.
bool host_kernels_enabled();

// Caps that width: 32 runs the AVX2 forms even on an AVX-512 CPU, 16 or less turns the
// hand-vectorised kernels off, 0 removes the cap. For tests of every form; process-wide, not
// thread-safe against kernels running concurrently.
void set_host_simd_cap(int bytes);

}  // namespace distop::kernels
