#pragma once
// Seeded, counter-based random numbers: the value drawn for element i depends only on (seed, i),
// never on the order of drawing or on how a tensor is partitioned, so a distributed tensor and its
// one-rank counterpart can be filled with identical values.

#include <Kokkos_Macros.hpp>
#include <cstdint>

// The constexpr functions also run inside device kernels (dropout's masks): without
// KOKKOS_INLINE_FUNCTION, nvcc compiles a device call to them as nothing.
namespace distop::random {

// SplitMix64's finaliser: a bijective 64-bit mix.
KOKKOS_INLINE_FUNCTION constexpr std::uint64_t mix(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A 64-bit value for element `index` of stream `seed`.
KOKKOS_INLINE_FUNCTION constexpr std::uint64_t bits(std::uint64_t seed,
                                                    std::uint64_t index) noexcept {
  return mix(mix(seed) ^ (index * 0xd1b54a32d192ed03ULL));
}

// Uniform in [0, 1), with 53 random bits.
KOKKOS_INLINE_FUNCTION constexpr double uniform(std::uint64_t seed, std::uint64_t index) noexcept {
  return static_cast<double>(bits(seed, index) >> 11) * 0x1.0p-53;
}

// Standard normal, by Box-Muller on two uniforms of the element's own sub-streams.
double normal(std::uint64_t seed, std::uint64_t index) noexcept;

}  // namespace distop::random
