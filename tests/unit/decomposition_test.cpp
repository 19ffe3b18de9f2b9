#include "distop/dist/decomposition.hpp"

#include <gtest/gtest.h>

#include "distop/core/error.hpp"

using distop::Decomposition;
using distop::Shape;

TEST(BalancedBounds, FirstRemainderPartsGetOneMore) {
  EXPECT_EQ(distop::balanced_bounds(10, 3), (std::vector<std::int64_t>{0, 4, 7, 10}));
  EXPECT_EQ(distop::balanced_bounds(8, 4), (std::vector<std::int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(distop::balanced_bounds(5, 1), (std::vector<std::int64_t>{0, 5}));
  EXPECT_EQ(distop::balanced_bounds(3, 3), (std::vector<std::int64_t>{0, 1, 2, 3}));
}

TEST(BalancedBounds, MorePartsThanElementsIsAnError) {
  EXPECT_THROW(distop::balanced_bounds(2, 3), distop::Error);
}

TEST(Decomposition, BalancedLocalShapesAndOffsets) {
  auto d = Decomposition::balanced(Shape{10, 7}, Shape{3, 2});
  EXPECT_EQ(d.local_shape({0, 0}), (Shape{4, 4}));
  EXPECT_EQ(d.local_shape({2, 1}), (Shape{3, 3}));
  EXPECT_EQ(d.local_offset({1, 1}), (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(d.local_offset({2, 0}), (std::vector<std::int64_t>{7, 0}));
  EXPECT_TRUE(d.balanced());
  EXPECT_FALSE(d.replicates(0));
}

TEST(Decomposition, AxisMapReplicatesUnusedGridAxes) {
  // A [batch, features] tensor on a [P_out, P_in] grid: features split by grid axis 0.
  auto d = Decomposition::balanced(Shape{5, 9}, Shape{3, 2}, {-1, 0});
  EXPECT_TRUE(d.replicates(1));
  EXPECT_FALSE(d.replicates(0));
  EXPECT_EQ(d.local_shape({1, 0}), (Shape{5, 3}));
  EXPECT_EQ(d.local_shape({1, 1}), (Shape{5, 3}));
  EXPECT_EQ(d.local_offset({2, 1}), (std::vector<std::int64_t>{0, 6}));
}

TEST(Decomposition, ExplicitBlocks) {
  auto d = Decomposition::blocks(Shape{10, 4}, Shape{3, 1}, {{1, 6, 3}, {4}});
  EXPECT_EQ(d.local_shape({1, 0}), (Shape{6, 4}));
  EXPECT_EQ(d.local_offset({2, 0}), (std::vector<std::int64_t>{7, 0}));
  EXPECT_FALSE(d.balanced());
}

TEST(Decomposition, BadInputsAreErrors) {
  // Rank mismatch without an axis map.
  EXPECT_THROW(Decomposition::balanced(Shape{4, 4, 4}, Shape{2, 2}), distop::Error);
  // More parts than elements.
  EXPECT_THROW(Decomposition::balanced(Shape{2, 8}, Shape{4, 1}), distop::Error);
  // Block extents that do not add up.
  EXPECT_THROW(Decomposition::blocks(Shape{10}, Shape{2}, {{3, 6}}), distop::Error);
  // Empty block.
  EXPECT_THROW(Decomposition::blocks(Shape{10}, Shape{2}, {{0, 10}}), distop::Error);
  // One grid axis splitting two tensor axes.
  EXPECT_THROW(Decomposition::balanced(Shape{4, 4}, Shape{2, 2}, {0, 0}), distop::Error);
  try {
    Decomposition::balanced(Shape{2, 8}, Shape{4, 1});
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split"), std::string::npos) << e.what();
  }
}

// Equality is of the boxes every grid cell holds, however the decompositions were derived.
TEST(Decomposition, EqualWhenEveryGridCellHoldsTheSameBox) {
  // Split over a grid axis of extent 1 is the same as unsplit.
  const auto mapped = Decomposition::balanced(Shape{6, 4}, Shape{1, 2}, {0, 1});
  const auto unmapped = Decomposition::balanced(Shape{6, 4}, Shape{1, 2}, {-1, 1});
  EXPECT_TRUE(mapped == unmapped);
  EXPECT_EQ(mapped.split_by(0), -1);
  EXPECT_EQ(mapped.split_by(1), 1);
  EXPECT_EQ(mapped.axis_map(), (std::vector<int>{0, 1}));  // the description is kept as given
  // Explicit blocks equal to the balanced ones.
  EXPECT_TRUE(Decomposition::blocks(Shape{6, 4}, Shape{1, 2}, {{6}, {2, 2}}, {-1, 1}) == mapped);
  // Unequal: one box differs (other block bounds), another grid axis splits, another grid.
  EXPECT_FALSE(Decomposition::blocks(Shape{6, 4}, Shape{1, 2}, {{6}, {1, 3}}, {-1, 1}) == mapped);
  EXPECT_FALSE(Decomposition::balanced(Shape{6, 4}, Shape{2, 2}, {1, -1}) ==
               Decomposition::balanced(Shape{6, 4}, Shape{2, 2}, {0, -1}));
  EXPECT_FALSE(Decomposition::balanced(Shape{6, 4}, Shape{2, 1}, {-1, -1}) ==
               Decomposition::balanced(Shape{6, 4}, Shape{1, 2}, {-1, -1}));
  EXPECT_FALSE(Decomposition::balanced(Shape{6, 4}, Shape{2}, {0, -1}) ==
               Decomposition::balanced(Shape{6, 4}, Shape{2}, {-1, -1}));
}
