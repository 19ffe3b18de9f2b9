// The library's scratch pool (src/core/scratch.hpp, internal): leases are exclusive, aligned and
// large enough, and given-back blocks are reused.
#include "../../src/core/scratch.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace {

using distop::detail::ScratchLease;
using distop::detail::ScratchSpace;

bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

TEST(ScratchPool, LeasesAreDistinctAlignedAndLargeEnough) {
  for (const auto space : {ScratchSpace::kHost, ScratchSpace::kDevice}) {
    std::vector<ScratchLease> leases;
    std::set<const void*> seen;
    for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{100},
                                    std::size_t{4096}, std::size_t{100}, std::size_t{0}}) {
      leases.emplace_back(bytes, space);
      EXPECT_NE(leases.back().data(), nullptr);
      EXPECT_TRUE(aligned64(leases.back().data()));
      EXPECT_GE(leases.back().capacity(), bytes);
      EXPECT_TRUE(seen.insert(leases.back().data()).second) << "a block leased twice";
    }
  }
}

TEST(ScratchPool, AGivenBackBlockIsReusedAndTheSmallestFitIsTaken) {
  distop::detail::release_cached_scratch();  // nothing cached from earlier tests
  const void* small = nullptr;
  const void* large = nullptr;
  {
    ScratchLease a(1000, ScratchSpace::kHost);
    ScratchLease b(100000, ScratchSpace::kHost);
    small = a.data();
    large = b.data();
  }
  {
    // Both cached: 900 bytes take the 1000-byte block, not the larger one.
    ScratchLease c(900, ScratchSpace::kHost);
    EXPECT_EQ(c.data(), small);
    ScratchLease d(50000, ScratchSpace::kHost);
    EXPECT_EQ(d.data(), large);
  }
  distop::detail::release_cached_scratch();
}

TEST(ScratchPool, MovedLeaseKeepsItsBlockAndTypedScratchHoldsItsCount) {
  ScratchLease a(256, ScratchSpace::kHost);
  const void* p = a.data();
  ScratchLease b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  distop::detail::Scratch<double> s(1000, ScratchSpace::kHost);
  for (int i = 0; i < 1000; ++i) s.data()[i] = i;  // ASan catches a short block
  EXPECT_EQ(s.data()[999], 999.0);
}

TEST(ScratchPool, ConcurrentLeasesNeverShareABlock) {
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int> clashes(kThreads, 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &clashes] {
      for (int r = 0; r < kRounds; ++r) {
        distop::detail::Scratch<int> s(64 + (r % 7) * 100, ScratchSpace::kHost);
        for (int i = 0; i < 64; ++i) s.data()[i] = t;
        std::this_thread::yield();
        for (int i = 0; i < 64; ++i) clashes[static_cast<std::size_t>(t)] += s.data()[i] != t;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(clashes[static_cast<std::size_t>(t)], 0);
}

}  // namespace
