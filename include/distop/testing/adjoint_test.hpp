#pragma once
// The dot-product adjoint test, for distop's operators and for users' own.

#include <cstdint>
#include <string>

#include "distop/ops/linear_operator.hpp"

namespace distop::testing {

// The outcome of one adjoint test: <F x, y> and <x, F* y> over all ranks, and their relative
// difference |<F x, y> - <x, F* y>| / (|F x| |y| + |x| |F* y|) (0 when both sides vanish).
struct AdjointReport {
  double forward_inner = 0;  // <F x, y>
  double adjoint_inner = 0;  // <x, F* y>
  double relative_error = 0;
  double tolerance = 0;
  bool passed = false;
  std::string str() const;
};

// The default tolerance: 1e-13 for double, 1e-5 for float.
template <class T>
constexpr double adjoint_tolerance() {
  return sizeof(T) >= 8 ? 1e-13 : 1e-5;
}

// A tensor of `space` filled with seeded uniform values in [-1, 1); each rank draws its own stream
// (seed, parent rank), so replicated copies differ, as they may under the sum convention.
template <class T>
DistTensor<T> random_tensor(const TensorSpace& space, std::uint64_t seed);

// Draws seeded random x in F's domain and y in its range on every rank, applies F and F*, and
// compares the inner products. Collective over the parent communicator of the operator's spaces:
// every rank of it calls, with the same seed. All ranks receive the same report.
template <class T>
AdjointReport adjoint_test(const LinearOperator<T>& op, std::uint64_t seed = 20261121,
                           double tolerance = adjoint_tolerance<T>());

}  // namespace distop::testing
