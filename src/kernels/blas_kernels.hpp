#pragma once
// Internal: which kernels the host BLAS runs. A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels
// from the CPU's identity when it loads; OpenBLAS 0.3.21 falls back to pre-AVX kernels on CPUs it
// does not know (Intel family 6 models from 0xB0 on, Emerald Rapids among them, get Prescott), 3-4
// times slower. distop corrects that choice when libdistop loads (choose_blas_kernels, run by a
// constructor in gemm.cpp), before any GEMM runs, unless the user chose the kernels with
// OPENBLAS_CORETYPE.

#include <string_view>

namespace distop::kernels::detail {

// The vector instructions the CPU and the OS offer: AVX2 with FMA; AVX-512 F, CD, BW, DQ and VL
// (what OpenBLAS's SkylakeX kernels use).
struct CpuVectors {
  bool avx2_fma = false;
  bool avx512 = false;
};

// This CPU's.
CpuVectors cpu_vectors();

// The OpenBLAS kernels to switch to when OpenBLAS chose `current` on a CPU with `cpu`: "SkylakeX"
// or "Haswell" where `current` is one of OpenBLAS's pre-AVX2 kernel families (Prescott, Nehalem,
// Sandybridge, ...) and the CPU has AVX-512 or AVX2 with FMA; nullptr to keep OpenBLAS's choice (it
// is AVX2-class or newer, or a name distop does not know, or `user_chose`: OPENBLAS_CORETYPE is
// set, and the user's choice stands).
const char* faster_openblas_core(std::string_view current, bool user_chose, CpuVectors cpu);

// Makes OpenBLAS run its `core` kernels (an OPENBLAS_CORETYPE name) from now on, as if
// OPENBLAS_CORETYPE=core had been set when it loaded; the variable itself is left as it was.
// Only between BLAS calls. Returns whether OpenBLAS now runs `core`: false where OpenBLAS was built
// for one target (no DYNAMIC_ARCH) or distop was built without OpenBLAS.
bool switch_openblas_core(const char* core);

// The name of the kernels OpenBLAS runs ("" without OpenBLAS).
std::string_view openblas_core();

// faster_openblas_core for this process, then switch_openblas_core. Idempotent.
void choose_blas_kernels();

// Whether OpenBLAS still runs pre-AVX2 kernels on an AVX2 CPU that the user did not choose
// (OPENBLAS_CORETYPE unset): an OpenBLAS that distop could not switch, several times slower than
// the CPU allows.
bool blas_kernels_slow();

}  // namespace distop::kernels::detail
