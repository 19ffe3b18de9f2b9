#include "distop/kernels/simd.hpp"

#include <atomic>

namespace distop::kernels {

namespace {

std::atomic<int> g_cap{0};

int cpu_simd_bytes() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const int bytes = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 64;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 32;
    return 0;
  }();
  return bytes;
#else
  return 0;
#endif
}

}  // namespace

int host_simd_bytes() {
  const int cpu = cpu_simd_bytes();
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap <= 0 || cpu <= cap) return cpu;
  return cap >= 32 ? 32 : 0;
}

void set_host_simd_cap(int bytes) { g_cap.store(bytes, std::memory_order_relaxed); }

}  // namespace distop::kernels
