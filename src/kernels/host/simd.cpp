#include "distop/kernels/simd.hpp"

#include <Kokkos_Core.hpp>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <type_traits>

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
  if (!host_kernels_enabled()) return 0;
  const int cpu = cpu_simd_bytes();
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap <= 0 || cpu <= cap) return cpu;
  return cap >= 32 ? 32 : 0;
}

bool host_kernels_enabled() {
#if defined(DISTOP_HOST_KERNELS) && !DISTOP_HOST_KERNELS
  return false;
#else
  if constexpr (!std::is_same_v<Kokkos::DefaultExecutionSpace::memory_space, Kokkos::HostSpace>) {
    return false;
  } else {
    // Read once, at the first call: DISTOP_HOST_KERNELS=off (or 0) switches the fast paths off.
    static const bool on = [] {
      const char* v = std::getenv("DISTOP_HOST_KERNELS");
      if (v == nullptr) return true;
      const std::string_view s(v);
      return !(s == "off" || s == "OFF" || s == "0");
    }();
    return on;
  }
#endif
}

void set_host_simd_cap(int bytes) { g_cap.store(bytes, std::memory_order_relaxed); }

}  // namespace distop::kernels
