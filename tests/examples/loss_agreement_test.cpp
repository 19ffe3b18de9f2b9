// An example's losses over its first 20 steps at 1, 2 and 4 ranks, and as 2 or 4 data-parallel
// replicas (each replica model-parallel over the rest of the ranks), with and without the optimizer
// state sharded over the replicas (--zero 1 or 2), from the same initial weights and data order
// and the same global batch, agree to 1e-4 relative (they differ only by float
// rounding in the reductions). Every losses.<run>.txt of the directory is compared with the
// 1-rank run's losses.np1.txt.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
std::vector<double> read_losses(const std::string& run) {
  std::ifstream in(std::filesystem::path(DISTOP_LOSSES_DIR) / ("losses." + run + ".txt"));
  std::vector<double> losses;
  long long step = 0;
  double loss = 0;
  while (in >> step >> loss) losses.push_back(loss);
  return losses;
}
}  // namespace

TEST(LossAgreement, LossesAgreeAcrossRankCounts) {
  const auto one = read_losses("np1");
  ASSERT_EQ(one.size(), 20u) << "the 1-rank run logged " << one.size() << " steps";
  for (double l : one) ASSERT_TRUE(std::isfinite(l) && l > 0);
  EXPECT_LT(one.back(), one.front()) << "the loss did not decrease over 20 steps";
  int compared = 0;
  for (const auto& e : std::filesystem::directory_iterator(DISTOP_LOSSES_DIR)) {
    const std::string file = e.path().filename().string();
    if (file.rfind("losses.", 0) != 0 || e.path().extension() != ".txt" || file == "losses.np1.txt")
      continue;
    const std::string run = file.substr(7, file.size() - 11);
    const auto other = read_losses(run);
    ASSERT_EQ(other.size(), one.size()) << run;
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_NEAR(other[i], one[i], 1e-4 * std::abs(one[i])) << run << ", step " << i + 1;
    ++compared;
  }
  EXPECT_GE(compared, 8) << "runs missing from " << DISTOP_LOSSES_DIR;
}
