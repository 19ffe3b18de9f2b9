// The pure parts of bench_step_model (benchmarks/step_model.hpp): the fat tree's machine, the
// buckets' reduction and the projections' efficiencies, against closed forms.
#include "../../benchmarks/step_model.hpp"

#include <gtest/gtest.h>

namespace {

using distop::bench::FatTree;

TEST(StepModel, FatTreeMachineWithinALeafAndAcrossSpines) {
  FatTree t;
  t.hosts_per_leaf = 4;
  t.bandwidth = 10e9;
  t.oversubscription = 2.0;
  const auto leaf = distop::bench::fat_tree_machine(t, 4);
  EXPECT_DOUBLE_EQ(leaf.alpha, 0.5e-6);
  EXPECT_DOUBLE_EQ(leaf.beta, 1e-10);
  const auto spine = distop::bench::fat_tree_machine(t, 5);
  EXPECT_DOUBLE_EQ(spine.alpha, 1.0e-6);
  EXPECT_DOUBLE_EQ(spine.beta, 2e-10);  // an uplink leaves each host half the bandwidth
  EXPECT_DOUBLE_EQ(spine.gamma, t.gamma);
  EXPECT_DOUBLE_EQ(spine.copy, t.copy);
}

TEST(StepModel, BucketIsAllToAllSumAndAllGather) {
  // r = 4 (a power of 2), bytes 4 MiB: all-to-all of 3 chunks of 1 MiB each way (3 alpha + 3 MiB
  // beta), 3 MiB summed, and an all-gather of 4 MiB, long: ring, 3 alpha + 3/4 of 4 MiB beta.
  const distop::cost::Machine m{1e-6, 1e-9, 2e-9, 0.5e-9};
  const std::int64_t mib = 1 << 20;
  const double expect = (3 * 1e-6 + 3.0 * mib * 1e-9) + 2e-9 * 3.0 * mib +
                        distop::cost::allgather(4 * mib, 4, m).seconds;
  EXPECT_DOUBLE_EQ(distop::bench::bucket_seconds(4 * mib, 4, m), expect);
  EXPECT_NEAR(distop::cost::allgather(4 * mib, 4, m).seconds, 3 * 1e-6 + 3.0 * mib * 1e-9, 1e-12);
  EXPECT_EQ(distop::bench::bucket_seconds(4 * mib, 1, m), 0.0);
  const auto red = distop::bench::reduction_seconds({mib, 4 * mib}, 4, m);
  EXPECT_DOUBLE_EQ(red.exposed, expect);
  EXPECT_DOUBLE_EQ(red.all, expect + distop::bench::bucket_seconds(mib, 4, m));
}

TEST(StepModel, EfficienciesAndLimitingTerm) {
  distop::bench::StepTerms base{1, 1024, 0.100, 0.004, 0.0};
  // Strong scaling to 8 replicas: compute 0.0125 (ideal), comm 0.0005 (ideal), reduction 0.002.
  distop::bench::StepTerms strong{8, 128, 0.0125, 0.0005, 0.002};
  EXPECT_DOUBLE_EQ(distop::bench::strong_efficiency(base, strong), 0.104 / (0.015 * 8));
  EXPECT_EQ(distop::bench::limiting_term(base, strong, true), "reduction");
  // Compute that shrinks less than the batch limits instead.
  strong.compute = 0.020;
  EXPECT_EQ(distop::bench::limiting_term(base, strong, true), "compute");
  // Weak scaling: the same terms plus a reduction.
  distop::bench::StepTerms weak{8, 1024, 0.100, 0.004, 0.006};
  EXPECT_DOUBLE_EQ(distop::bench::weak_efficiency(base, weak), 0.104 / 0.110);
  EXPECT_EQ(distop::bench::limiting_term(base, weak, false), "reduction");
}

}  // namespace
