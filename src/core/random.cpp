#include "distop/core/random.hpp"

#include <cmath>
#include <numbers>

namespace distop::random {

double normal(std::uint64_t seed, std::uint64_t index) noexcept {
  const double u1 = 1.0 - uniform(seed, 2 * index);  // (0, 1]: log stays finite
  const double u2 = uniform(seed, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace distop::random
