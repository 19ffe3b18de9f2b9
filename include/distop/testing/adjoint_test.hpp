#pragma once
// The dot-product adjoint test, for distop's operators and for users' own.

#include <cstdint>
#include <string>

#include "distop/ops/linear_operator.hpp"

namespace distop::testing {

// The outcome of one adjoint test: <F x, y> and <x, F* y> over all ranks, and the adjoint's
// relative error |<F x, y> - <x, F* y>| / |<F x, y>|.
//
// The normalisation. An adjoint off by a factor, F*' = (1 + e) F*, reads as e exactly. The test
// draws y with a component along F x, y = z + s F x (z seeded random, s = +-|z| / |F x| with the
// sign of <F x, z>), so that |<F x, y>| = |<F x, z>| + |F x| |z| >= |F x| |y| / 2: the divisor is
// never small against the inner products' own rounding (at most about |F x| |y| times the
// precision), whatever the operator or the draw. (Dividing by |F x| |y| + |x| |F* y| instead, with
// y independent of x, makes a 0.1 % wrong adjoint read about 1e-3 / sqrt(entries).) z keeps y
// random in every direction, so F* is tested off the range of F too. Where F x = 0, the divisor
// is |x| |F* y| (and the error |<x, F* y>| / that, 1 for any nonzero F* y), or 1 if that is 0 too.
// The inner products are accumulated in double, over all ranks, for float operators too.
struct AdjointReport {
  double forward_inner = 0;  // <F x, y>
  double adjoint_inner = 0;  // <x, F* y>
  double relative_error = 0;
  double tolerance = 0;
  bool passed = false;
  // "PASS: ..." or "FAIL: ...", with the inner products, the error and the tolerance.
  std::string str() const;
};

// The default tolerance: 1e-13 for double, 1e-5 for float (a correct float adjoint reads a few
// times 1e-8; one off by 1e-4 reads 1e-4).
template <class T>
constexpr double adjoint_tolerance() {
  return sizeof(T) >= 8 ? 1e-13 : 1e-5;
}

// A tensor of `space` filled with seeded uniform values in [-1, 1); each rank draws its own stream
// (seed, parent rank), so replicated copies differ, as they may under the sum convention.
template <class T>
DistTensor<T> random_tensor(const TensorSpace& space, std::uint64_t seed);

// Draws seeded random x in F's domain and y in its range (see AdjointReport) on every rank,
// applies F and F*, and compares the inner products. Collective over the parent communicator of the
// operator's spaces: every rank of it calls, with the same seed. All ranks receive the same report.
template <class T>
AdjointReport adjoint_test(const LinearOperator<T>& op, std::uint64_t seed = 20261121,
                           double tolerance = adjoint_tolerance<T>());

}  // namespace distop::testing
