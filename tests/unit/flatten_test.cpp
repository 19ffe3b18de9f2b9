// nn::flatten: shapes, shared storage, the gradient, and mismatched output spaces.
#include "distop/nn/flatten.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::Tape;
using distop::TensorSpace;
using distop::Var;
namespace test = distop::test;

TensorSpace space_of(const Shape& s) {
  return TensorSpace(s, Partition::self(Shape(std::vector<std::int64_t>(s.extents().size(), 1))));
}

TEST(Flatten, ReshapesEveryBoxToRows) {
  const auto xs = space_of(Shape{2, 3, 4, 5});
  const auto ys = distop::nn::flatten_space(xs);
  EXPECT_EQ(ys.global_shape(), (Shape{2, 60}));
  EXPECT_EQ(ys.local_shape(), (Shape{2, 60}));
  auto xv = test::random_tensor<double>(xs, 1);
  Tape tape;
  auto y = distop::nn::flatten(tape, Var<double>(xv));
  EXPECT_EQ(y.space(), ys);
  EXPECT_EQ(y.value().local().to_vector(), xv.local().to_vector());  // row-major order kept
  EXPECT_EQ(y.value().data(), xv.data());                            // and the storage
}

TEST(Flatten, GradientMatchesFiniteDifferences) {
  Var<double> x(test::random_tensor<double>(space_of(Shape{2, 2, 3}), 2), true);
  const auto r = test::random_tensor<double>(distop::nn::flatten_space(x.space()), 3);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, distop::nn::flatten(tape, x), r); }, {x});
}

TEST(Flatten, GradientsAccumulateWhenUsedTwice) {
  Var<double> x(test::random_tensor<double>(space_of(Shape{2, 2, 3}), 2), true);
  const auto r = test::random_tensor<double>(distop::nn::flatten_space(x.space()), 3);
  Tape tape;
  auto l1 = test::weighted_sum(tape, distop::nn::flatten(tape, x), r);
  auto l2 = test::weighted_sum(tape, distop::nn::flatten(tape, x), r);
  l1.grad().local().fill(1.0);
  l2.grad().local().fill(2.0);
  tape.backward();
  const auto g = x.grad().local().to_vector();
  const auto rv = r.local().to_vector();
  ASSERT_EQ(g.size(), rv.size());
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], 3 * rv[i]);
}

TEST(Flatten, MismatchedSpacesAreErrors) {
  Tape tape;
  Var<double> x(DistTensor<double>(space_of(Shape{2, 3, 4})));
  EXPECT_THROW(distop::nn::flatten(tape, x, space_of(Shape{2, 11})), distop::Error);
  EXPECT_THROW(distop::nn::flatten(tape, x, space_of(Shape{24})), distop::Error);
  EXPECT_THROW(distop::nn::flatten_space(space_of(Shape{4})), distop::Error);
}

}  // namespace
