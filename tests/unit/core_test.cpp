#include <gtest/gtest.h>

#include "distop/autodiff/tape.hpp"
#include "distop/core/random.hpp"
#include "distop/core/tensor.hpp"

using distop::Shape;
using distop::Tensor;

TEST(Shape, NumelStridesAndText) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.strides(), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
}

TEST(Tensor, ZeroInitialisedAndRoundTrips) {
  Tensor<double> t(Shape{2, 3});
  for (double v : t.to_vector()) EXPECT_EQ(v, 0.0);
  auto u = Tensor<float>::from_vector(Shape{2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(u.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  auto c = u.clone();
  c.fill(7);
  EXPECT_EQ(u.to_vector()[0], 1.0f);  // clone is deep
  auto r = u.reshaped(Shape{4});
  r.fill(5);
  EXPECT_EQ(u.to_vector()[3], 5.0f);  // reshape shares storage
}

TEST(Tensor, BadShapesAreErrors) {
  EXPECT_THROW(Tensor<float>::from_vector(Shape{2, 2}, {1, 2, 3}), distop::Error);
  EXPECT_THROW(Tensor<float>(Shape{2, 2}).reshaped(Shape{3}), distop::Error);
  EXPECT_THROW(Tensor<float>(Shape{-1}), distop::Error);
  Tensor<float> a(Shape{3});
  EXPECT_THROW(a.copy_from(Tensor<float>(Shape{4})), distop::Error);
}

TEST(Random, CounterBasedAndInRange) {
  EXPECT_EQ(distop::random::uniform(7, 123), distop::random::uniform(7, 123));
  EXPECT_NE(distop::random::uniform(7, 123), distop::random::uniform(8, 123));
  double mean = 0, var = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = distop::random::uniform(1, static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const double z = distop::random::normal(1, static_cast<std::uint64_t>(i));
    mean += z;
    var += z * z;
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(Tape, ReplaysInExactReverseOrderAndClears) {
  distop::Tape tape;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) tape.record("op" + std::to_string(i), [&order, i] { order.push_back(i); });
  EXPECT_EQ(tape.size(), 5u);
  EXPECT_EQ(tape.names().front(), "op0");
  tape.backward();
  EXPECT_EQ(order, (std::vector<int>{4, 3, 2, 1, 0}));
  EXPECT_EQ(tape.size(), 0u);
}

TEST(Tape, ClearsEvenWhenAnAdjointThrows) {
  distop::Tape tape;
  tape.record("ok", [] {});
  tape.record("bad", [] { throw distop::Error("test", "boom"); });
  EXPECT_THROW(tape.backward(), distop::Error);
  EXPECT_EQ(tape.size(), 0u);
}

TEST(Error, CarriesOperationAndDetail) {
  distop::Error e("Broadcast", "expected [2] found [3]");
  EXPECT_EQ(e.op(), "Broadcast");
  EXPECT_EQ(e.detail(), "expected [2] found [3]");
  EXPECT_NE(std::string(e.what()).find("Broadcast"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos);
}
