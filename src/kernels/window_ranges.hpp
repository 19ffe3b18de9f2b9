#pragma once
// Internal: which outputs of a window read inside the input, along one axis.

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace distop::kernels {

// Along an axis of extent n, output o of tap offset b (input index o * s + b) reads inside
// [0, n) exactly for o in [lo, hi), clipped to [0, m).
KOKKOS_INLINE_FUNCTION void valid_range(std::int64_t b, std::int64_t s, std::int64_t n,
                                        std::int64_t m, std::int64_t& lo, std::int64_t& hi) {
  if (s == 1) {  // the common case, without divisions
    lo = b >= 0 ? 0 : -b;
    hi = n - b < 0 ? 0 : n - b;
  } else {
    lo = b >= 0 ? 0 : (-b + s - 1) / s;
    hi = n - 1 - b < 0 ? 0 : (n - 1 - b) / s + 1;
  }
  if (lo > m) lo = m;
  if (hi > m) hi = m;
  if (hi < lo) hi = lo;
}

}  // namespace distop::kernels
