#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

using distop::HostTensor;
using distop::Shape;

// Tensor::wrap shares external memory (what the Python package hands over from torch and numpy):
// no copy, writes visible both ways, and the owner lives exactly as long as a Tensor uses it.
TEST(TensorWrap, SharesTheMemoryAndKeepsTheOwnerAlive) {
  auto owner = std::make_shared<std::vector<double>>(std::vector<double>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<double>> watch = owner;
  double* data = owner->data();
  {
    auto t = HostTensor<double>::wrap(data, Shape{2, 3}, owner);
    owner.reset();
    EXPECT_FALSE(watch.expired());  // held by t
    EXPECT_EQ(t.data(), data);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
    t.fill(7);
    EXPECT_EQ(data[5], 7);
    data[0] = -1;
    EXPECT_EQ(t.to_vector()[0], -1);
    auto copy = t.reshaped(Shape{6});  // shares storage, and so the owner
    EXPECT_TRUE(t.shares_storage());
    auto deep = t.clone();  // a copy of its own
    EXPECT_NE(deep.data(), data);
    EXPECT_EQ(deep.to_vector()[1], 7);
  }
  EXPECT_TRUE(watch.expired());
}

TEST(TensorWrap, EmptyAndBadArguments) {
  auto empty = HostTensor<float>::wrap(nullptr, Shape{0, 3}, nullptr);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
  float x = 1;
  EXPECT_THROW(HostTensor<float>::wrap(nullptr, Shape{2}, nullptr), distop::Error);
  EXPECT_THROW(HostTensor<float>::wrap(&x, Shape{-1}, nullptr), distop::Error);
}
