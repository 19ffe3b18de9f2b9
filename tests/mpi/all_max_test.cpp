// all_max / all_min: values, the gradient against central finite differences over every rank's
// entries, ties going to the lowest group rank, and bad axes.
#include "distop/nn/all_max.hpp"
#include "distop/nn/all_min.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/kernels/reduce.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

using Reduce = Var<double> (*)(Tape&, const Var<double>&, const std::vector<int>&);

template <class T>
DistTensor<T> from(const TensorSpace& space, const std::vector<T>& v) {
  DistTensor<T> t(space);
  t.local().copy_from(Tensor<T>::from_vector(space.local_shape(), v));
  return t;
}

// Distinct across the ranks of any group, entry by entry, and at least 0.1 apart: 7 r mod 11 takes
// distinct values for r < 11.
std::vector<double> distinct_values(const TensorSpace& space) {
  const auto idx = space.global_indices();
  std::vector<double> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] = 0.1 * static_cast<double>((7 * world_rank() + 3 * idx[i]) % 11) - 0.4;
  return v;
}

// Output-gradient weights, different on every rank.
std::vector<double> weights(const TensorSpace& space) {
  const auto idx = space.global_indices();
  std::vector<double> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] = 0.25 + 0.5 * world_rank() + 0.125 * static_cast<double>(idx[i] % 5);
  return v;
}

// L = sum over all ranks of <reduce(x)_r, w_r>, collective over the world.
double loss(Reduce reduce, const Var<double>& x, const std::vector<int>& axes,
            const DistTensor<double>& w) {
  Tape tape;
  auto y = reduce(tape, x, axes);
  double l = kernels::dot(y.value().local(), w.local());
  MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return l;
}

// The tape's dL/dx against (L(x + h e) - L(x - h e)) / 2h for every entry e of every rank's box,
// one rank's entry at a time (every rank joins each evaluation).
void expect_gradient_matches(Reduce reduce, const TensorSpace& space, const std::vector<double>& x0,
                             const std::vector<int>& axes) {
  Var<double> x(from(space, x0), true);
  const auto w = from(space, weights(space));
  Tape tape;
  auto y = reduce(tape, x, axes);
  y.grad().local().copy_from(w.local());
  tape.backward();
  const auto analytic = x.grad().local().to_vector();
  ASSERT_EQ(analytic.size(), x0.size());

  long long most = static_cast<long long>(x0.size());
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  const double h = 1e-6;
  for (int q = 0; q < world_size(); ++q) {
    for (long long i = 0; i < most; ++i) {
      const bool mine = q == world_rank() && i < static_cast<long long>(x0.size());
      auto set = [&](double delta) {
        if (!mine) return;
        auto v = x0;
        v[static_cast<std::size_t>(i)] += delta;
        x.value().local().copy_from(Tensor<double>::from_vector(space.local_shape(), v));
      };
      set(h);
      const double plus = loss(reduce, x, axes, w);
      set(-h);
      const double minus = loss(reduce, x, axes, w);
      set(0);
      if (mine) {
        const double numeric = (plus - minus) / (2 * h);
        EXPECT_NEAR(analytic[static_cast<std::size_t>(i)], numeric,
                    1e-7 * std::max(1.0, std::abs(numeric)))
            << "rank " << q << ", entry " << i;
      }
    }
  }
}

std::vector<TensorSpace> spaces() {
  const int n = world_size();
  std::vector<TensorSpace> s;
  Partition world = Partition::world(Shape{n});
  s.emplace_back(world, Decomposition::balanced(Shape{2, 3}, world.shape(), {-1, -1}));
  if (n >= 3) {  // a group of two with idle ranks in between
    Partition pair = Partition::world(Shape{2}, {n - 1, 0});
    s.emplace_back(pair, Decomposition::balanced(Shape{5}, pair.shape(), {-1}));
  }
  return s;
}

}  // namespace

TEST(AllMax, GradientMatchesFiniteDifferences) {
  for (const auto& s : spaces()) {
    SCOPED_TRACE(s.str());
    expect_gradient_matches(&nn::all_max<double>, s, distinct_values(s), {0});
  }
}

TEST(AllMin, GradientMatchesFiniteDifferences) {
  for (const auto& s : spaces()) {
    SCOPED_TRACE(s.str());
    expect_gradient_matches(&nn::all_min<double>, s, distinct_values(s), {0});
  }
}

TEST(AllMax, OverOneAxisOfATwoDimensionalGrid) {
  DISTOP_REQUIRE_RANKS(4);
  // [2, 2] grid, features split by grid axis 1, the maximum taken down each column (axis 0).
  Partition grid = Partition::world(Shape{2, 2});
  TensorSpace s(grid, Decomposition::balanced(Shape{3, 4}, grid.shape(), {-1, 1}));
  expect_gradient_matches(&nn::all_max<double>, s, distinct_values(s), {0});
  expect_gradient_matches(&nn::all_min<double>, s, distinct_values(s), {0});
}

TEST(AllMax, ValuesAndGradientGoToTheHolderOfTheMaximum) {
  const int n = world_size();
  Partition world = Partition::world(Shape{n});
  TensorSpace s(world, Decomposition::balanced(Shape{4}, world.shape(), {-1}));
  // Entry i is largest on rank i % n and smallest on rank (i + 1) % n.
  std::vector<double> v(4);
  for (int i = 0; i < 4; ++i) {
    const int r = world_rank();
    v[i] = r == i % n ? 10.0 + i : (r == (i + 1) % n ? -10.0 - i : 0.5 * r);
  }
  const auto w = weights(s);
  double wsum[4] = {w[0], w[1], w[2], w[3]};
  MPI_Allreduce(MPI_IN_PLACE, wsum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (bool minimum : {false, true}) {
    SCOPED_TRACE(minimum ? "min" : "max");
    Var<double> x(from(s, v), true);
    Tape tape;
    auto y = minimum ? nn::all_min(tape, x, {0}) : nn::all_max(tape, x, {0});
    y.grad().local().copy_from(from(s, w).local());
    tape.backward();
    const auto yv = y.value().local().to_vector();
    const auto g = x.grad().local().to_vector();
    for (int i = 0; i < 4; ++i) {
      const int holder = n == 1 ? 0 : (minimum ? (i + 1) % n : i % n);
      const double expected = n == 1 ? v[i] : (minimum ? -10.0 - i : 10.0 + i);
      EXPECT_EQ(yv[i], expected) << "entry " << i;
      EXPECT_EQ(g[i], world_rank() == holder ? wsum[i] : 0.0) << "entry " << i;
    }
  }
}

TEST(AllMax, TiesGoToTheLowestGroupRank) {
  const int n = world_size();
  Partition world = Partition::world(Shape{n});
  TensorSpace s(world, Decomposition::balanced(Shape{3}, world.shape(), {-1}));
  // Entry 0: every rank ties. Entry 1: all ranks but 0 tie at the top. Entry 2: ties at the bottom
  // on every rank but the last.
  const int r = world_rank();
  const std::vector<double> v{2.5, r == 0 && n > 1 ? 1.0 : 3.0, r == n - 1 && n > 1 ? 9.0 : -4.0};
  const auto w = weights(s);
  double wsum[3] = {w[0], w[1], w[2]};
  MPI_Allreduce(MPI_IN_PLACE, wsum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const int top_of_1 = n > 1 ? 1 : 0;
  {
    Var<double> x(from(s, v), true);
    Tape tape;
    auto y = nn::all_max(tape, x, {0});
    y.grad().local().copy_from(from(s, w).local());
    tape.backward();
    const auto g = x.grad().local().to_vector();
    EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{2.5, 3.0, n > 1 ? 9.0 : -4.0}));
    EXPECT_EQ(g[0], r == 0 ? wsum[0] : 0.0);
    EXPECT_EQ(g[1], r == top_of_1 ? wsum[1] : 0.0);
    EXPECT_EQ(g[2], r == n - 1 ? wsum[2] : 0.0);
  }
  {
    Var<double> x(from(s, v), true);
    Tape tape;
    auto y = nn::all_min(tape, x, {0});
    y.grad().local().copy_from(from(s, w).local());
    tape.backward();
    const auto g = x.grad().local().to_vector();
    EXPECT_EQ(y.value().local().to_vector(), (std::vector<double>{2.5, n > 1 ? 1.0 : 3.0, -4.0}));
    EXPECT_EQ(g[0], r == 0 ? wsum[0] : 0.0);
    EXPECT_EQ(g[1], r == 0 ? wsum[1] : 0.0);
    EXPECT_EQ(g[2], r == 0 ? wsum[2] : 0.0);
  }
}

TEST(AllMax, FloatValuesAndNoTapeWithoutGradients) {
  const int n = world_size();
  Partition world = Partition::world(Shape{n});
  TensorSpace s(world, Decomposition::balanced(Shape{2}, world.shape(), {-1}));
  const float r = static_cast<float>(world_rank());
  Var<float> x(from<float>(s, {r, -r}));
  Tape tape;
  auto y = nn::all_max(tape, x, {0});
  auto z = nn::all_min(tape, x, {0});
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_EQ(y.value().local().to_vector(), (std::vector<float>{static_cast<float>(n - 1), 0.0f}));
  EXPECT_EQ(z.value().local().to_vector(), (std::vector<float>{0.0f, -static_cast<float>(n - 1)}));
}

TEST(AllMax, ReducingOverASplitAxisIsAnError) {
  const int n = world_size();
  TensorSpace split(Shape{2 * n}, Partition::world(Shape{n}));
  Var<double> x(DistTensor<double>(split), true);
  Tape tape;
  EXPECT_THROW(nn::all_max(tape, x, {0}), Error);
  EXPECT_THROW(nn::all_min(tape, x, {1}), Error);
  EXPECT_EQ(tape.size(), 0u);
}
