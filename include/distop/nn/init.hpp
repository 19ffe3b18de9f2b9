#pragma once
// Parameter initialisation that does not depend on the partitioning.

#include <cstdint>
#include <string_view>

#include "distop/dist/dist_tensor.hpp"

namespace distop::nn {

// Fills x with values uniform in [-bound, bound): the entry at global index i gets
// 2 uniform(seed, i) - 1 scaled by bound (core/random.hpp). A distributed parameter and its one-rank
// counterpart, filled with the same seed, hold the same values entry for entry; replicated copies
// are identical.
template <class T>
void uniform_init(DistTensor<T>& x, std::uint64_t seed, double bound);

// Fills x with values from N(mean, std^2): the entry at global index i gets
// mean + std random::normal(seed, i), so that, as for uniform_init, every partitioning of x and
// every replicated copy holds the same values.
template <class T>
void normal_init(DistTensor<T>& x, std::uint64_t seed, double mean = 0.0, double std = 1.0);

// The seed of a named parameter of a layer seeded with `layer_seed` ("weight", "bias").
std::uint64_t parameter_seed(std::uint64_t layer_seed, std::string_view parameter);

}  // namespace distop::nn
