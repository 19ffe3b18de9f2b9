#pragma once
// Test helpers: fill a distributed tensor with the global linear index of each entry, and read
// back what a rank should hold.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace distop::test {

template <class T>
void fill_global_index(DistTensor<T>& x, double scale = 1.0) {
  auto g = x.space().global_indices();
  std::vector<T> v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) v[i] = static_cast<T>(scale * static_cast<double>(g[i]));
  x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

// Whether every local entry of x equals scale times its global index in `space` (the space whose
// boxes x's entries came from; by default x's own). Names the first entry that differs.
template <class T>
::testing::AssertionResult holds_global_index(const DistTensor<T>& x, double scale,
                                              const TensorSpace& space) {
  const auto g = space.global_indices();
  const auto v = x.local().to_vector();
  if (v.size() != g.size())
    return ::testing::AssertionFailure() << v.size() << " local entries, expected " << g.size();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (static_cast<double>(v[i]) != scale * static_cast<double>(g[i]))
      return ::testing::AssertionFailure() << "entry " << i << " is " << v[i] << ", expected "
                                           << scale * static_cast<double>(g[i]);
  return ::testing::AssertionSuccess();
}
template <class T>
::testing::AssertionResult holds_global_index(const DistTensor<T>& x, double scale = 1.0) {
  return holds_global_index(x, scale, x.space());
}

}  // namespace distop::test
