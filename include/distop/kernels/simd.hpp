#pragma once
// Which vector instructions distop's hand-vectorised host kernels use on this CPU.

namespace distop::kernels {

// The widest vectors the hand-vectorised host kernels (the direct convolutions, the 2-wide max
// pooling) use here, in bytes: 64 (AVX-512), 32 (AVX2 with FMA), or 0 where there are none (not
// x86-64, an older CPU, or a device build's kernels), after the cap below. Detected once, at the
// first call. Where a kernel has no form for the width found, the portable kernels run instead.
int host_simd_bytes();
// Whether the host fast paths of the kernels run (src/kernels/host/: the hand-vectorised and
// host-only scalar forms): compiled in, by the build option DISTOP_ENABLE_HOST_KERNELS (ON by
// default) in a build whose kernels run on the host, and not switched off at run time by the
// environment variable DISTOP_HOST_KERNELS=off (or 0), which is read once, at the first call
// (any kernel with a fast path makes it). False in a device build, where the option is OFF and
// where the variable says off: then the portable Kokkos kernels, the ones a GPU runs, run on the
// host too, and host_simd_bytes() is 0.
bool host_kernels_enabled();

// Caps that width: 32 runs the AVX2 forms even on an AVX-512 CPU, 16 or less turns the
// hand-vectorised kernels off, 0 removes the cap. For tests of every form; process-wide, not
// thread-safe against kernels running concurrently.
void set_host_simd_cap(int bytes);

}  // namespace distop::kernels
