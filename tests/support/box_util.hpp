#pragma once
// Test helpers: fill a distributed tensor with the global linear index of each entry, and read
// back what a rank should hold.

#include <cstdint>
#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace distop::test {

// For every local entry, its row-major linear index in the global tensor.
inline std::vector<std::int64_t> global_indices(const TensorSpace& space) {
  const auto& local = space.local_shape();
  const auto& offset = space.local_offset();
  const auto gstride = space.global_shape().strides();
  std::vector<std::int64_t> out(static_cast<std::size_t>(local.numel()));
  const int r = local.rank();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(r), 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t g = 0;
    for (int d = 0; d < r; ++d) g += (idx[d] + offset[d]) * gstride[d];
    out[i] = g;
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <class T>
void fill_global_index(DistTensor<T>& x, double scale = 1.0) {
  auto g = global_indices(x.space());
  std::vector<T> v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) v[i] = static_cast<T>(scale * static_cast<double>(g[i]));
  x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

}  // namespace distop::test
