// The deterministic shuffling sampler: permutations, determinism, batches and shards.
#include "distop/data/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "distop/core/error.hpp"

using distop::data::BatchRange;
using distop::data::Sampler;
using distop::data::SamplerOptions;
using Order = std::vector<std::int64_t>;

namespace {

bool is_permutation_of_iota(Order order) {
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<std::int64_t>(i)) return false;
  return true;
}

Order iota(std::int64_t n) {
  Order out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), std::int64_t{0});
  return out;
}

}  // namespace

TEST(SamplerTest, ShuffledOrderIsAPermutation) {
  for (std::int64_t n : {0, 1, 2, 3, 17, 1000, 60000}) {
    const Order order = distop::data::shuffled_order(n, 42, 3);
    EXPECT_EQ(static_cast<std::int64_t>(order.size()), n);
    EXPECT_TRUE(is_permutation_of_iota(order)) << "size " << n;
  }
}

TEST(SamplerTest, DeterministicForSeedAndEpoch) {
  const Sampler a(1000, 32, {.shuffle = true, .drop_last = false, .seed = 7});
  const Sampler b(1000, 32, {.shuffle = true, .drop_last = false, .seed = 7});
  for (std::uint64_t epoch : {0u, 1u, 5u}) EXPECT_EQ(a.order(epoch), b.order(epoch));
  EXPECT_EQ(a.order(2), distop::data::shuffled_order(1000, 7, 2));
}

TEST(SamplerTest, DiffersAcrossEpochsAndSeeds) {
  const Sampler s(1000, 10, {.seed = 7});
  const Order e0 = s.order(0);
  EXPECT_NE(e0, iota(1000));
  EXPECT_NE(e0, s.order(1));
  EXPECT_NE(s.order(1), s.order(2));
  EXPECT_NE(e0, Sampler(1000, 10, {.seed = 8}).order(0));
  // A key that mixed seed and epoch symmetrically would make these equal.
  EXPECT_NE(distop::data::shuffled_order(1000, 1, 0), distop::data::shuffled_order(1000, 0, 1));
}

TEST(SamplerTest, IdentityWhenShuffleIsOff) {
  const Sampler s(37, 8, {.shuffle = false, .seed = 99});
  for (std::uint64_t epoch : {0u, 1u, 12u}) EXPECT_EQ(s.order(epoch), iota(37));
}

TEST(SamplerTest, ShuffleIsNearlyUniformOverSmallPermutations) {
  // Every permutation of 3 elements should come up about equally often across epochs; an
  // off-by-one in the Fisher-Yates range skews or removes some of them. The draws are seeded, so
  // this test is deterministic; the bounds are about five standard deviations.
  std::map<Order, int> counts;
  constexpr int kEpochs = 6000;
  for (std::uint64_t epoch = 0; epoch < kEpochs; ++epoch)
    ++counts[distop::data::shuffled_order(3, 2024, epoch)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
}

TEST(SamplerTest, BatchRanges) {
  EXPECT_EQ(distop::data::batch_ranges(10, 4, false),
            (std::vector<BatchRange>{{0, 4}, {4, 8}, {8, 10}}));
  EXPECT_EQ(distop::data::batch_ranges(10, 4, true), (std::vector<BatchRange>{{0, 4}, {4, 8}}));
  EXPECT_EQ(distop::data::batch_ranges(8, 4, true), (std::vector<BatchRange>{{0, 4}, {4, 8}}));
  EXPECT_EQ(distop::data::batch_ranges(3, 4, false), (std::vector<BatchRange>{{0, 3}}));
  EXPECT_TRUE(distop::data::batch_ranges(3, 4, true).empty());
  EXPECT_TRUE(distop::data::batch_ranges(0, 4, false).empty());
  EXPECT_THROW(distop::data::batch_ranges(10, 0, false), distop::Error);
  EXPECT_THROW(distop::data::batch_ranges(-1, 1, false), distop::Error);
}

TEST(SamplerTest, BatchesCoverTheEpochOrder) {
  for (bool drop_last : {false, true}) {
    const Sampler s(103, 10, {.drop_last = drop_last, .seed = 1});
    const std::vector<BatchRange> batches = s.batches();
    ASSERT_EQ(static_cast<std::int64_t>(batches.size()), s.num_batches());
    EXPECT_EQ(s.num_batches(), drop_last ? 10 : 11);
    const Order order = s.order(4);
    Order seen;
    for (std::int64_t b = 0; b < s.num_batches(); ++b) {
      EXPECT_EQ(s.batch(b), batches[static_cast<std::size_t>(b)]);
      const Order idx = Sampler::indices(order, s.batch(b));
      EXPECT_EQ(static_cast<std::int64_t>(idx.size()), s.batch(b).size());
      seen.insert(seen.end(), idx.begin(), idx.end());
    }
    EXPECT_EQ(seen, Order(order.begin(), order.begin() + (drop_last ? 100 : 103)));
    EXPECT_THROW(s.batch(s.num_batches()), distop::Error);
    EXPECT_THROW(s.batch(-1), distop::Error);
  }
  EXPECT_THROW(Sampler(10, 0), distop::Error);
  EXPECT_THROW(Sampler::indices(iota(5), {3, 6}), distop::Error);
}

TEST(SamplerTest, ShardsSplitABatchContiguously) {
  const BatchRange batch{20, 30};
  EXPECT_EQ(distop::data::shard(batch, 0, 3), (BatchRange{20, 24}));
  EXPECT_EQ(distop::data::shard(batch, 1, 3), (BatchRange{24, 27}));
  EXPECT_EQ(distop::data::shard(batch, 2, 3), (BatchRange{27, 30}));
  // More parts than examples: the last parts are empty, and the pieces still tile the batch.
  std::int64_t next = 0;
  for (int p = 0; p < 5; ++p) {
    const BatchRange piece = distop::data::shard({0, 3}, p, 5);
    EXPECT_EQ(piece.begin, next);
    EXPECT_EQ(piece.size(), p < 3 ? 1 : 0);
    next = piece.end;
  }
  EXPECT_EQ(next, 3);
  EXPECT_THROW(distop::data::shard(batch, 3, 3), distop::Error);
  EXPECT_THROW(distop::data::shard(batch, 0, 0), distop::Error);
}
