// DistributedSampler against torch.utils.data.DistributedSampler's definition.

#include "distop/data/distributed_sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/data/sampler.hpp"

namespace {

using distop::data::DistributedSampler;
using distop::data::DistributedSamplerOptions;

TEST(DistributedSampler, PadsByRepeatingTheHeadAndInterleavesTheReplicas) {
  // 10 examples over 4 replicas, in file order: num_samples 3, total 12, the head 0, 1 repeated.
  std::vector<std::vector<std::int64_t>> got;
  for (int r = 0; r < 4; ++r)
    got.push_back(DistributedSampler(10, 4, r, {.shuffle = false}).indices());
  EXPECT_EQ(got[0], (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(got[1], (std::vector<std::int64_t>{1, 5, 9}));
  EXPECT_EQ(got[2], (std::vector<std::int64_t>{2, 6, 0}));
  EXPECT_EQ(got[3], (std::vector<std::int64_t>{3, 7, 1}));
  DistributedSampler s(10, 4, 2, {.shuffle = false});
  EXPECT_EQ(s.num_samples(), 3);
  EXPECT_EQ(s.total_size(), 12);
  EXPECT_FALSE(s.is_padding(1));
  EXPECT_TRUE(s.is_padding(2));
  // Padding longer than the data set repeats it whole: 2 examples over 5 replicas.
  EXPECT_EQ(DistributedSampler(2, 5, 0, {.shuffle = false}).padded_order(),
            (std::vector<std::int64_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  DistributedSampler s(10, 4, 1, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(s.num_samples(), 2);
  EXPECT_EQ(s.total_size(), 8);
  EXPECT_EQ(s.indices(), (std::vector<std::int64_t>{1, 5}));
  EXPECT_EQ(DistributedSampler(12, 4, 3, {.drop_last = true}).num_samples(), 3);
  EXPECT_EQ(DistributedSampler(2, 3, 0, {.drop_last = true}).num_samples(), 0);
  EXPECT_TRUE(DistributedSampler(2, 3, 0, {.drop_last = true}).indices().empty());
}

TEST(DistributedSampler, ShuffledEpochsCoverTheDataSetAndDependOnSeedAndEpochOnly) {
  const std::int64_t n = 1001;
  for (const int replicas : {1, 2, 3, 7}) {
    std::multiset<std::int64_t> seen;
    for (int r = 0; r < replicas; ++r) {
      DistributedSampler s(n, replicas, r, {.seed = 5});
      s.set_epoch(3);
      const auto mine = s.indices();
      EXPECT_EQ(static_cast<std::int64_t>(mine.size()), s.num_samples());
      seen.insert(mine.begin(), mine.end());
      // The same sampler made anew gives the same share: a function of (seed, epoch) alone.
      DistributedSampler again(n, replicas, r, {.seed = 5});
      again.set_epoch(3);
      EXPECT_EQ(again.indices(), mine);
    }
    for (std::int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << i;
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), (n + replicas - 1) / replicas * replicas);
  }
  DistributedSampler a(n, 2, 0, {.seed = 5}), b(n, 2, 0, {.seed = 6});
  a.set_epoch(1);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  const auto e1 = a.indices();
  a.set_epoch(2);
  EXPECT_NE(a.indices(), e1);
  // The permutation is distop's shuffled_order of (seed, epoch).
  const auto order = distop::data::shuffled_order(n, 5, 2);
  EXPECT_EQ(a.indices()[1], order[2]);
}

TEST(DistributedSampler, BadArgumentsAreErrors) {
  EXPECT_THROW(DistributedSampler(-1, 2, 0), distop::Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), distop::Error);
  EXPECT_THROW(DistributedSampler(10, 2, 2), distop::Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), distop::Error);
}

}  // namespace
