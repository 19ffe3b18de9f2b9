#pragma once
// Test helpers: fill a distributed tensor with the global linear index of each entry, and read
// back what a rank should hold; compare a rank's box with a global tensor, and sum the copies a
// replicated tensor has on the ranks.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace distop::test {

template <class T>
void fill_global_index(DistTensor<T>& x, double scale = 1.0) {
  auto g = x.space().global_indices();
  std::vector<T> v(g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    v[i] = static_cast<T>(scale * static_cast<double>(g[i]));
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

// Expects every entry of this rank's box of `got` to equal the entry of the global tensor `want`
// (row-major) at its global index, to tol times max(1, |want|).
inline void expect_box_near(const DistTensor<double>& got, const std::vector<double>& want,
                            double tol, const std::string& what) {
  const auto idx = got.space().global_indices();
  const auto v = got.local().to_vector();
  ASSERT_EQ(v.size(), idx.size()) << what;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double e = want[static_cast<std::size_t>(idx[i])];
    EXPECT_NEAR(v[i], e, tol * std::max(1.0, std::abs(e))) << what << " entry " << i;
  }
}

// The sum over the ranks of MPI_COMM_WORLD of each rank's copy of a tensor of `numel` entries held
// whole (zeros where a rank holds none): under the sum convention, what the copies add up to.
inline std::vector<double> sum_over_ranks(const DistTensor<double>& t, std::size_t numel) {
  std::vector<double> v = t.local().to_vector();
  if (v.empty()) v.assign(numel, 0.0);
  EXPECT_EQ(v.size(), numel);
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  return v;
}

}  // namespace distop::test
