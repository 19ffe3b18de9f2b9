#pragma once
// Runs the hand-vectorised kernels capped at a vector width for a scope
// (kernels::set_host_simd_cap: 32 the AVX2 forms, 16 the portable ones, 0 no cap), and lifts the
// cap when the scope ends, also when a failed ASSERT returns early, so that later tests see the
// widest forms again.

#include "distop/kernels/simd.hpp"

namespace distop::test {

class SimdCapScope {
 public:
  explicit SimdCapScope(int bytes) { kernels::set_host_simd_cap(bytes); }
  ~SimdCapScope() { kernels::set_host_simd_cap(0); }
  SimdCapScope(const SimdCapScope&) = delete;
  SimdCapScope& operator=(const SimdCapScope&) = delete;
};

}  // namespace distop::test
