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
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/reduce.hpp"

namespace distop::test {

// [batch, features] on this process alone (Partition::self()), the feature axis unsplit as local
// layers require.
inline TensorSpace local_batch_space(std::int64_t batch, std::int64_t features) {
  Partition p = Partition::self();
  return TensorSpace(p, Decomposition::balanced(Shape{batch, features}, p.shape(), {0, -1}));
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

// L = <y, r> as a scalar [1] on y's partition, recorded so that backward adds dL r to y's
// gradient: turns a layer with a tensor output into a scalar to differentiate.
template <class T>
Var<T> weighted_sum(Tape& tape, const Var<T>& y, const DistTensor<T>& r) {
  const Partition& p = y.space().partition();
  DistTensor<T> s(TensorSpace(p, Decomposition::balanced(Shape{1}, p.shape(), {-1})));
  if (s.local_numel() > 0)
    s.local().fill(static_cast<T>(kernels::dot(y.value().local(), r.local())));
  Var<T> out(std::move(s), y.requires_grad());
  if (y.requires_grad()) {
    tape.record("weighted_sum", [yin = y, out, r]() mutable {
      if (!out.has_grad()) return;
      auto dy = r.clone();
      if (dy.local_numel() > 0) kernels::scale(out.grad().local().to_vector()[0], dy.local());
      yin.accumulate_grad(std::move(dy));
    });
  }
  return out;
}

// Runs `loss` on a fresh tape and returns its value (the only component: serial tests).
inline double evaluate(const std::function<Var<double>(Tape&)>& loss) {
  Tape tape;
  auto l = loss(tape);
  tape.clear();
  return l.value().local().to_vector().at(0);
}

// Checks d loss / d v from the tape against (L(v + h e_i) - L(v - h e_i)) / 2h for every entry i
// of every v in `wrt`, to `rel_tol` relative to max(1, |finite difference|).
inline void expect_gradients_match(const std::function<Var<double>(Tape&)>& loss,
                                   std::vector<Var<double>> wrt, double h = 1e-6,
                                   double rel_tol = 1e-7) {
  for (auto& v : wrt) v.zero_grad();
  Tape tape;
  auto l = loss(tape);
  backward(tape, l);
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    Var<double>& v = wrt[k];
    ASSERT_TRUE(v.has_grad()) << "variable " << k << " received no gradient";
    const auto analytic = v.grad().local().to_vector();
    Tensor<double>& value = v.value().local();
    const auto x0 = value.to_vector();
    for (std::size_t i = 0; i < x0.size(); ++i) {
      auto x = x0;
      x[i] = x0[i] + h;
      value.copy_from(Tensor<double>::from_vector(value.shape(), x));
      const double plus = evaluate(loss);
      x[i] = x0[i] - h;
      value.copy_from(Tensor<double>::from_vector(value.shape(), x));
      const double minus = evaluate(loss);
      value.copy_from(Tensor<double>::from_vector(value.shape(), x0));
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, rel_tol * std::max(1.0, std::abs(numeric)))
          << "variable " << k << ", entry " << i;
    }
  }
  for (auto& v : wrt) v.zero_grad();
}

}  // namespace distop::test
