#pragma once
// Test helpers for gradient checks of tape-recorded layers against central finite differences.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/reduce.hpp"
#include "distop/testing/gradcheck.hpp"

namespace distop::test {

// [batch, features] on this process alone (Partition::self()), the feature axis unsplit as local
// layers require.
inline TensorSpace local_batch_space(std::int64_t batch, std::int64_t features) {
  Partition p = Partition::self();
  return TensorSpace(p, Decomposition::balanced(Shape{batch, features}, p.shape(), {0, -1}));
}

// Any shape on this process alone, every axis unsplit.
inline TensorSpace local_space(const Shape& shape) {
  Partition p = Partition::self();
  return TensorSpace(
      p, Decomposition::balanced(shape, p.shape(),
                                 std::vector<int>(static_cast<std::size_t>(shape.rank()), -1)));
}

// Uniform in [lo, hi) from (seed, global index), in any space.
template <class T>
DistTensor<T> random_tensor(const TensorSpace& space, std::uint64_t seed, double lo = -1.0,
                            double hi = 1.0) {
  DistTensor<T> x(space);
  auto idx = space.global_indices();
  std::vector<T> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] =
        static_cast<T>(lo + (hi - lo) * random::uniform(seed, static_cast<std::uint64_t>(idx[i])));
  x.local().copy_from(Tensor<T>::from_vector(space.local_shape(), v));
  return x;
}

// L = <y, r> as a scalar [1] on y's partition (each rank's component its box's part), recorded
// so that backward adds dL r to y's gradient: turns a layer with a tensor output into a scalar to
// differentiate.
template <class T>
Var<T> weighted_sum(Tape& tape, const Var<T>& y, const DistTensor<T>& r) {
  return make_function<T>(tape, "weighted_sum", {y}, [&] {
    const Partition& p = y.space().partition();
    DistTensor<T> s(TensorSpace(p, Decomposition::balanced(Shape{1}, p.shape(), {-1})));
    if (s.local_numel() > 0)
      s.local().fill(static_cast<T>(kernels::dot(y.value().local(), r.local())));
    return Computed{std::move(s), [r](const DistTensor<T>& ds, Gradients<T>& grads) {
                      auto dy = r.clone();
                      if (dy.local_numel() > 0)
                        kernels::scale(ds.local().to_vector()[0], dy.local());
                      grads.add(0, std::move(dy));
                    }};
  });
}

// Checks d loss / d v from the tape against central differences for every entry i of every v in
// `wrt` (testing::gradcheck with step h), to `rel_tol` relative to max(1, |finite difference|).
inline void expect_gradients_match(const std::function<Var<double>(Tape&)>& loss,
                                   std::vector<Var<double>> wrt, double h = 1e-6,
                                   double rel_tol = 1e-7) {
  const testing::GradcheckReport report =
      testing::gradcheck(loss, wrt, {.step = h, .tolerance = rel_tol});
  EXPECT_TRUE(report.passed) << report.str();
}

// Expects got (float) to equal want (double) entry by entry, to tol times max(1, |want|).
inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want,
                            double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " entry " << i;
}

// The same values in double.
inline DistTensor<double> widened(const DistTensor<float>& x) {
  DistTensor<double> out(x.space());
  const auto v = x.local().to_vector();
  out.local().copy_from(
      Tensor<double>::from_vector(x.local().shape(), std::vector<double>(v.begin(), v.end())));
  return out;
}

// Checks a layer's float form against its double form: fd(tape, x) and ff(tape, x) compute the
// same function in double and in float. Both see the same input x (uniform in [lo, hi) in float,
// widened for fd) and the same loss L = <f(x), r>; their outputs and input gradients must agree
// to tol times max(1, |double value|). Parameters the callables use keep their gradients for the
// caller to compare.
template <class FD, class FF>
void expect_float_matches_double(const TensorSpace& space, const FD& fd, const FF& ff, double tol,
                                 std::uint64_t seed = 1, double lo = -1.0, double hi = 1.0) {
  Var<float> xf(random_tensor<float>(space, seed, lo, hi), true);
  Var<double> xd(widened(xf.value()), true);
  Tape tf;
  Var<float> yf = ff(tf, xf);
  const auto rf = random_tensor<float>(yf.space(), seed + 1);
  auto lf = weighted_sum(tf, yf, rf);
  backward(tf, lf);
  Tape td;
  Var<double> yd = fd(td, xd);
  auto ld = weighted_sum(td, yd, widened(rf));
  backward(td, ld);
  expect_near_all(yf.value().local().to_vector(), yd.value().local().to_vector(), tol, "output");
  ASSERT_TRUE(xf.has_grad() && xd.has_grad()) << "the input received no gradient";
  expect_near_all(xf.grad().local().to_vector(), xd.grad().local().to_vector(), tol,
                  "input gradient");
}

}  // namespace distop::test
