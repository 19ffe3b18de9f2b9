// The cost model's formulas against their closed forms (Thakur, Rabenseifner and Gropp 2005) and
// MPICH 4.0's algorithm choices at the default thresholds.
#include "distop/ops/cost_model.hpp"

#include <gtest/gtest.h>

namespace {

using distop::CommStats;
using distop::cost::Algorithm;
using distop::cost::Direction;
using distop::cost::Machine;

// Distinct powers of ten, so that each term of a formula shows in the sum.
const Machine kM{1e-6, 1e-9, 1e-10, 1e-11};

double a(double k) { return k * kM.alpha; }
double b(double k) { return k * kM.beta; }
double g(double k) { return k * kM.gamma; }

TEST(CostModel, PointToPointIsAlphaPlusNBeta) {
  const auto e = distop::cost::point_to_point(4096, kM);
  EXPECT_EQ(e.algorithm, Algorithm::kPointToPoint);
  EXPECT_DOUBLE_EQ(e.seconds, a(1) + b(4096));
}

TEST(CostModel, AllgatherRingOnNonPowerOfTwo) {
  // p = 6, 1 MiB: ring, (p - 1) alpha + (p - 1) / p n beta.
  const std::int64_t n = 1 << 20;
  const auto e = distop::cost::allgather(n, 6, kM);
  EXPECT_EQ(e.algorithm, Algorithm::kRing);
  EXPECT_DOUBLE_EQ(e.seconds, a(5) + b(5.0 / 6 * n));
}

TEST(CostModel, AllgatherPicksByThreshold) {
  // Power of 2 below the long threshold: recursive doubling, log p alpha.
  EXPECT_EQ(distop::cost::allgather(4096, 8, kM).algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_DOUBLE_EQ(distop::cost::allgather(4096, 8, kM).seconds, a(3) + b(7.0 / 8 * 4096));
  // Not a power of 2, short: Bruck, ceil(log p) alpha.
  EXPECT_EQ(distop::cost::allgather(4096, 6, kM).algorithm, Algorithm::kBruck);
  EXPECT_DOUBLE_EQ(distop::cost::allgather(4096, 6, kM).seconds, a(3) + b(5.0 / 6 * 4096));
  // At the long threshold a power of 2 goes to the ring.
  EXPECT_EQ(distop::cost::allgather(524288, 8, kM).algorithm, Algorithm::kRing);
}

TEST(CostModel, AllreduceShortRecursiveDoublingLongRabenseifner) {
  const auto s = distop::cost::allreduce(2048, 8, kM);
  EXPECT_EQ(s.algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_DOUBLE_EQ(s.seconds, 3 * (a(1) + b(2048) + g(2048)));
  const std::int64_t n = 1 << 22;
  const auto l = distop::cost::allreduce(n, 8, kM);
  EXPECT_EQ(l.algorithm, Algorithm::kRabenseifner);
  EXPECT_DOUBLE_EQ(l.seconds, a(6) + b(2 * 7.0 / 8 * n) + g(7.0 / 8 * n));
  // At p = 2 Rabenseifner is one exchange of half the vector each way, twice.
  EXPECT_DOUBLE_EQ(distop::cost::allreduce(n, 2, kM).seconds, a(2) + b(n) + g(n / 2.0));
}

TEST(CostModel, BcastBinomialScatterDoublingScatterRing) {
  // Fewer than 8 ranks: binomial at any size.
  const std::int64_t big = 1 << 24;
  EXPECT_EQ(distop::cost::bcast(big, 4, kM).algorithm, Algorithm::kBinomial);
  EXPECT_DOUBLE_EQ(distop::cost::bcast(big, 4, kM).seconds, 2 * (a(1) + b(big)));
  // Short: binomial.
  EXPECT_EQ(distop::cost::bcast(12287, 16, kM).algorithm, Algorithm::kBinomial);
  // Medium, power of 2: scatter + recursive doubling, 2 log p alpha + 2 (p-1)/p n beta.
  const auto m = distop::cost::bcast(65536, 16, kM);
  EXPECT_EQ(m.algorithm, Algorithm::kScatterRecursiveDoubling);
  EXPECT_DOUBLE_EQ(m.seconds, a(8) + b(2 * 15.0 / 16 * 65536));
  // Long: scatter + ring, (log p + p - 1) alpha.
  const auto l = distop::cost::bcast(big, 16, kM);
  EXPECT_EQ(l.algorithm, Algorithm::kScatterRing);
  EXPECT_DOUBLE_EQ(l.seconds, a(4 + 15) + b(2 * 15.0 / 16 * big));
}

TEST(CostModel, ReduceScatterHalvingThenPairwise) {
  const auto s = distop::cost::reduce_scatter(65536, 4, kM);
  EXPECT_EQ(s.algorithm, Algorithm::kRecursiveHalving);
  EXPECT_DOUBLE_EQ(s.seconds, a(2) + b(0.75 * 65536) + g(0.75 * 65536));
  const auto l = distop::cost::reduce_scatter(1 << 20, 4, kM);
  EXPECT_EQ(l.algorithm, Algorithm::kPairwise);
  EXPECT_DOUBLE_EQ(l.seconds, a(3) + b(0.75 * (1 << 20)) + g(0.75 * (1 << 20)));
}

TEST(CostModel, OneRankMovesNothing) {
  EXPECT_EQ(distop::cost::allreduce(1 << 20, 1, kM).seconds, 0.0);
  EXPECT_EQ(distop::cost::bcast(1 << 20, 1, kM).algorithm, Algorithm::kLocal);
  EXPECT_EQ(distop::cost::alltoallv(100, 100, 0, kM).seconds, 0.0);
}

TEST(CostModel, PointToPointPlanTakesTheSlowerSide) {
  CommStats s;
  s.messages_sent = 2;
  s.bytes_sent = 1000;
  s.messages_received = 3;
  s.bytes_received = 4000;
  distop::cost::LocalWork w;
  w.packed = 100;
  w.copied = 500;
  w.unpacked = 200;
  w.summed = 4000;
  // The receive side is the slower here: pack, copy, 3 messages, 4000 B, unpack, sum.
  EXPECT_DOUBLE_EQ(distop::cost::point_to_point_plan(s, w, kM),
                   a(3) + b(4000) + (100 + 500 + 200) * kM.copy + g(4000));
  // A pure sender: its local copy overlaps the send, so only the send counts.
  CommStats sender;
  sender.messages_sent = 1;
  sender.bytes_sent = 1 << 20;
  distop::cost::LocalWork own;
  own.copied = 1 << 20;
  EXPECT_DOUBLE_EQ(distop::cost::point_to_point_plan(sender, own, kM), a(1) + b(1 << 20));
  // Nothing to send or receive: the copies alone.
  EXPECT_DOUBLE_EQ(distop::cost::point_to_point_plan(CommStats{}, own, kM), (1 << 20) * kM.copy);
}

TEST(CostModel, DistopBroadcastAndSumReduceAtTwoAndMoreRanks) {
  const std::int64_t n = 1 << 20;
  // p = 2: one message; the sum adds the received vector.
  EXPECT_DOUBLE_EQ(distop::cost::broadcast(Direction::kForward, n, 2, kM), a(1) + b(n));
  EXPECT_DOUBLE_EQ(distop::cost::broadcast(Direction::kAdjoint, n, 2, kM), a(1) + b(n) + g(n));
  EXPECT_DOUBLE_EQ(distop::cost::sum_reduce(Direction::kForward, n, 2, kM),
                   distop::cost::broadcast(Direction::kAdjoint, n, 2, kM));
  // p = 8: MPI_Bcast / MPI_Reduce.
  EXPECT_DOUBLE_EQ(distop::cost::broadcast(Direction::kForward, n, 8, kM),
                   distop::cost::bcast(n, 8, kM).seconds);
  EXPECT_DOUBLE_EQ(distop::cost::sum_reduce(Direction::kForward, n, 8, kM),
                   distop::cost::reduce(n, 8, kM).seconds);
  EXPECT_DOUBLE_EQ(distop::cost::all_sum_reduce(n, 8, kM, /*in_place=*/true),
                   distop::cost::allreduce(n, 8, kM).seconds);
  EXPECT_DOUBLE_EQ(distop::cost::all_sum_reduce(n, 8, kM),
                   distop::cost::allreduce(n, 8, kM).seconds + n * kM.copy);
}

}  // namespace

namespace {

TEST(CostModel, AlgorithmNames) {
  EXPECT_EQ(distop::cost::to_string(Algorithm::kRabenseifner), "rabenseifner");
  EXPECT_EQ(distop::cost::to_string(Algorithm::kScatterRing), "scatter_ring");
  EXPECT_EQ(distop::cost::to_string(distop::cost::allgather(1 << 20, 3, kM).algorithm), "ring");
}

}  // namespace
