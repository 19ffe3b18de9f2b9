#pragma once
// Test helpers: fill a distributed tensor with the global linear index of each entry, and read
// back what a rank should hold.

#include <cstdint>
#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace distop::test {

inline std::vector<std::int64_t> global_indices(const TensorSpace& space) {
  return space.global_indices();
}

template <class T>
void fill_global_index(DistTensor<T>& x, double scale = 1.0) {
  auto g = x.space().global_indices();
  std::vector<T> v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) v[i] = static_cast<T>(scale * static_cast<double>(g[i]));
  x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

}  // namespace distop::test
