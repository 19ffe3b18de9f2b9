#pragma once
// Internal: AVX-512 and AVX2 forms of the box kernels' inner sweeps (kernels/box.hpp), chosen at
// run time (kernels/simd.hpp).

#include <cstdint>

namespace distop::kernels::detail {

// Whether copy_sweep and add_sweep run on this CPU: AVX-512, or AVX2 with FMA, within the cap of
// set_host_simd_cap. They take the widest of the two.
bool simd_box_sweeps();

// count runs of run entries each: run i of d (at d + i sd) = run i of s (at s + i ss), or += for
// add_sweep. 64-byte (or 32-byte) vectors, a masked one for the end of a run; the runs of d must
// not overlap those of s, nor (for add_sweep) each other. copy_sweep requests the lines of runs
// shorter than a page but a page or more apart two runs ahead (the hardware prefetchers stop at
// page boundaries), and copies a run from its end where its destination lies a little ahead of
// its source modulo a page (so that its loads do not wait on its own stores).
template <class T>
void copy_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
                std::int64_t run);
template <class T>
void add_sweep(T* d, std::int64_t sd, const T* s, std::int64_t ss, std::int64_t count,
               std::int64_t run);

}  // namespace distop::kernels::detail
