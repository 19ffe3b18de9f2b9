// nn::concat, split and chunk: values and spaces, torch's chunk sizes, gradients (pieces no
// gradient reached included), bad input.
#include "distop/nn/concat.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string_view>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/reduction.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Error;
using distop::Shape;
using distop::Tape;
using distop::Var;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

// Entry (i, j, k) of a row-major [a, b, c] tensor.
double at(const std::vector<double>& v, const Shape& s, std::int64_t i, std::int64_t j,
          std::int64_t k) {
  return v[static_cast<std::size_t>((i * s[1] + j) * s[2] + k)];
}

TEST(Concat, ValuesAlongEachAxis) {
  const Shape base{2, 3, 4};
  for (int axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(axis);
    const int a = axis < 0 ? axis + 3 : axis;
    std::vector<Var<double>> xs;
    std::vector<std::int64_t> extents{2, 1, 3};
    for (std::size_t n = 0; n < extents.size(); ++n) {
      Shape s = base;
      s[a] = extents[n];
      xs.emplace_back(random_tensor<double>(local_space(s), n + 1), false);
    }
    Tape tape;
    auto y = nn::concat(tape, xs, axis);
    Shape ys = base;
    ys[a] = 6;
    ASSERT_EQ(y.space().global_shape(), ys);
    const auto yv = y.value().local().to_vector();
    std::int64_t offset = 0;
    for (std::size_t n = 0; n < xs.size(); ++n) {
      const Shape& s = xs[n].space().global_shape();
      const auto xv = xs[n].value().local().to_vector();
      for (std::int64_t i = 0; i < s[0]; ++i)
        for (std::int64_t j = 0; j < s[1]; ++j)
          for (std::int64_t k = 0; k < s[2]; ++k) {
            std::int64_t idx[3] = {i, j, k};
            idx[a] += offset;
            ASSERT_EQ(at(yv, ys, idx[0], idx[1], idx[2]), at(xv, s, i, j, k));
          }
      offset += s[a];
    }
  }
}

TEST(Concat, GradientsMatchFiniteDifferences) {
  Var<double> a(random_tensor<double>(local_space(Shape{2, 3}), 1), true);
  Var<double> b(random_tensor<double>(local_space(Shape{2, 1}), 2), true);
  Var<double> c(random_tensor<double>(local_space(Shape{2, 0}), 3), true);  // empty along the axis
  const auto r = random_tensor<double>(local_space(Shape{2, 7}), 4);
  // a appears twice: its gradient is the sum of both slices'.
  test::expect_gradients_match(
      [&](Tape& t) {
        return test::weighted_sum(t, nn::concat(t, {a, b, c, a}, 1), r);
      },
      {a, b});
  const auto r0 = random_tensor<double>(local_space(Shape{4, 3}), 5);
  test::expect_gradients_match(
      [&](Tape& t) {
        return test::weighted_sum(t, nn::concat(t, {a, a}, 0), r0);
      },
      {a});
}

TEST(Concat, MismatchedInputsAreErrors) {
  Tape tape;
  auto var = [](const Shape& s) { return Var<double>(DistTensor<double>(local_space(s)), true); };
  EXPECT_THROW(nn::concat(tape, std::vector<Var<double>>{}, 0), Error);
  EXPECT_THROW(nn::concat(tape, {var(Shape{2, 3}), var(Shape{3, 3})}, 1), Error);     // other axis
  EXPECT_THROW(nn::concat(tape, {var(Shape{2, 3}), var(Shape{2, 3, 1})}, 1), Error);  // rank
  EXPECT_THROW(nn::concat(tape, {var(Shape{2, 3}), var(Shape{2, 3})}, 2), Error);     // axis
  EXPECT_THROW(nn::concat(tape, {var(Shape{2, 3}), var(Shape{2, 3})}, -3), Error);
  EXPECT_THROW(nn::concat(tape, {var(Shape{2, 3}), Var<double>()}, 0), Error);  // undefined
  EXPECT_NO_THROW(nn::concat(tape, {var(Shape{2, 3}), var(Shape{2, 3})}, -2));
}

TEST(Split, ValuesAndSpaces) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 7}), 6), false);
  Tape tape;
  auto parts = nn::split(tape, x, {2, 0, 5}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].space().global_shape(), (Shape{3, 2}));
  EXPECT_EQ(parts[1].space().global_shape(), (Shape{3, 0}));
  EXPECT_EQ(parts[2].space().global_shape(), (Shape{3, 5}));
  const auto xv = x.value().local().to_vector();
  const auto p0 = parts[0].value().local().to_vector();
  const auto p2 = parts[2].value().local().to_vector();
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 2; ++j) EXPECT_EQ(p0[i * 2 + j], xv[i * 7 + j]);
    for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(p2[i * 5 + j], xv[i * 7 + 2 + j]);
  }
  // Joining the pieces gives x back.
  EXPECT_EQ(nn::concat(tape, parts, 1).value().local().to_vector(), xv);
}

// torch.chunk's sizes: ceil(n / chunks) each, the last smaller, possibly fewer pieces.
TEST(Chunk, TorchSizes) {
  auto sizes = [](std::int64_t n, std::int64_t chunks) {
    Var<double> x(DistTensor<double>(local_space(Shape{2, n})), false);
    Tape tape;
    std::vector<std::int64_t> out;
    for (const auto& p : nn::chunk(tape, x, chunks, -1)) out.push_back(p.space().global_shape()[1]);
    return out;
  };
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(sizes(6, 3), (V{2, 2, 2}));
  EXPECT_EQ(sizes(7, 3), (V{3, 3, 1}));
  EXPECT_EQ(sizes(5, 4), (V{2, 2, 1}));  // 3 pieces, not 4
  EXPECT_EQ(sizes(6, 4), (V{2, 2, 2}));
  EXPECT_EQ(sizes(3, 5), (V{1, 1, 1}));
  EXPECT_EQ(sizes(1, 1), (V{1}));
  EXPECT_EQ(sizes(0, 3), (V{0, 0, 0}));
}

TEST(Split, GradientsMatchFiniteDifferencesWithUnusedPieces) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 7}), 7), true);
  // Uneven chunks 3, 3, 1: the product of the first two; the last piece gets no gradient, so its
  // slice of dx must be zero, not left uninitialised.
  const auto r = random_tensor<double>(local_space(Shape{3, 3}), 8);
  test::expect_gradients_match(
      [&](Tape& t) {
        auto p = nn::chunk(t, x, 3, 1);
        return test::weighted_sum(t, nn::mul(t, p[0], p[1]), r);
      },
      {x});
  Tape tape;
  auto p = nn::chunk(tape, x, 3, 1);
  auto l = test::weighted_sum(tape, p[1], r);
  distop::backward(tape, l);
  const auto g = x.grad().local().to_vector();
  const auto rv = r.local().to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 7; ++j)
      EXPECT_EQ(g[i * 7 + j], j >= 3 && j < 6 ? rv[i * 3 + j - 3] : 0.0) << i << ", " << j;
  x.zero_grad();
  // Along the first axis, every piece used.
  const auto r1 = random_tensor<double>(local_space(Shape{1, 7}), 9);
  test::expect_gradients_match(
      [&](Tape& t) {
        auto q = nn::split(t, x, {1, 2}, 0);
        return test::weighted_sum(t, nn::add(t, nn::sum(t, q[1], {0}, true), q[0]), r1);
      },
      {x});
}

TEST(Split, BadSizesAreErrors) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 7}), 6), true);
  Tape tape;
  EXPECT_THROW(nn::split(tape, x, {2, 4}, 1), Error);   // adds up to 6, not 7
  EXPECT_THROW(nn::split(tape, x, {8, -1}, 1), Error);  // negative
  EXPECT_THROW(nn::split(tape, x, {}, 1), Error);       // nothing
  EXPECT_THROW(nn::split(tape, x, {3, 4}, 2), Error);   // no such axis
  EXPECT_THROW(nn::chunk(tape, x, 0, 1), Error);        // no chunks
  EXPECT_THROW(nn::chunk(tape, x, -2, 0), Error);
  EXPECT_EQ(tape.size(), 0u);
}

// Counts, while it lives, the Kokkos allocations of BoxPlans' run offsets and the deep copies into
// them (Kokkos' profiling hooks, as in box_plan_test.cpp).
struct PlanEventCounter {
  static inline std::int64_t allocations = 0;
  static inline std::int64_t deep_copies = 0;
  static bool is_plan(const char* label) {
    return std::string_view(label) == "distop::BoxPlan::starts";
  }
  PlanEventCounter() {
    allocations = 0;
    deep_copies = 0;
    Kokkos::Tools::Experimental::set_allocate_data_callback(
        [](Kokkos::Tools::SpaceHandle, const char* label, const void*, std::uint64_t) {
          allocations += is_plan(label);
        });
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(
        [](Kokkos::Tools::SpaceHandle, const char* dst, const void*, Kokkos::Tools::SpaceHandle,
           const char*, const void*, std::uint64_t) { deep_copies += is_plan(dst); });
  }
  ~PlanEventCounter() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
  }
  PlanEventCounter(const PlanEventCounter&) = delete;
  PlanEventCounter& operator=(const PlanEventCounter&) = delete;
};

// concat's and split's copies (forward and backward, the zero fill of a piece no gradient
// reached included) go through BoxPlans built at the first call of a shape: a later step with the
// same shapes builds none, so it allocates nothing and copies nothing from the host for them (on a
// device, a Box-taking copy describes its box on the device on every call).
TEST(Concat, RepeatedStepsBuildNoBoxPlans) {
  Var<double> a(random_tensor<double>(local_space(Shape{4, 5, 6}), 10), true);
  Var<double> b(random_tensor<double>(local_space(Shape{4, 3, 6}), 11), true);
  const auto r = random_tensor<double>(local_space(Shape{4, 4, 6}), 12);
  auto step = [&] {
    Tape tape;
    auto parts = nn::split(tape, nn::concat(tape, {a, b}, 1), {2, 4, 2}, 1);
    auto loss = test::weighted_sum(tape, parts[1], r);  // pieces 0 and 2 unused
    distop::backward(tape, loss);
  };
  {
    PlanEventCounter counter;
    step();
    ASSERT_GE(PlanEventCounter::allocations, 1) << "the profiling hook saw no plan built";
  }
  const auto ga = a.grad().local().to_vector();
  a.zero_grad();
  b.zero_grad();
  PlanEventCounter counter;
  for (int i = 0; i < 3; ++i) step();
  EXPECT_EQ(PlanEventCounter::allocations, 0);
  EXPECT_EQ(PlanEventCounter::deep_copies, 0);
  // The same gradient, three times over: rows 2 to 4 of a's axis 1 get r's first three rows.
  const auto ga3 = a.grad().local().to_vector();
  ASSERT_EQ(ga3.size(), ga.size());
  for (std::size_t i = 0; i < ga.size(); ++i) EXPECT_DOUBLE_EQ(ga3[i], 3 * ga[i]) << i;
}

}  // namespace
