#pragma once
// Internal: compiling the hand-vectorised host kernels for instruction sets beyond the build's
// baseline. The kernels run only where kernels::host_simd_bytes() finds those instructions.
//
// DISTOP_SIMD_X86 is defined where the x86-64 forms can be compiled (GCC or Clang for the host;
// not nvcc or nvc++), with <immintrin.h> included. Functions between
// DISTOP_TARGET_BEGIN("avx512f") and DISTOP_TARGET_END compile for the instruction sets named.

// DISTOP_HOST_KERNELS=0 (the build option DISTOP_ENABLE_HOST_KERNELS=OFF) compiles none of them.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(__NVCOMPILER) && (!defined(DISTOP_HOST_KERNELS) || DISTOP_HOST_KERNELS)
#define DISTOP_SIMD_X86 1
#include <immintrin.h>
#endif

#include "distop/kernels/simd.hpp"

namespace distop::kernels::detail {
// Whether this CPU runs the AVX-512 forms of the hand-vectorised kernels (within the cap of
// set_host_simd_cap), and they were compiled.
inline bool host_avx512() {
#ifdef DISTOP_SIMD_X86
  return host_simd_bytes() >= 64;
#else
  return false;
#endif
}
}  // namespace distop::kernels::detail

#define DISTOP_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define DISTOP_TARGET_BEGIN(isa) \
  DISTOP_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define DISTOP_TARGET_END DISTOP_PRAGMA(clang attribute pop)
#else
#define DISTOP_TARGET_BEGIN(isa) DISTOP_PRAGMA(GCC push_options) DISTOP_PRAGMA(GCC target(isa))
#define DISTOP_TARGET_END DISTOP_PRAGMA(GCC pop_options)
#endif
