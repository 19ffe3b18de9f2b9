// An example's losses over its first 20 steps at 1, 2 and 4 ranks, from the same initial weights
// and data order, agree to 1e-4 relative (they differ only by float rounding in the reductions).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace {
std::vector<double> read_losses(int ranks) {
  std::ifstream in(std::string(DISTOP_LOSSES_DIR) + "/losses.np" + std::to_string(ranks) + ".txt");
  std::vector<double> losses;
  long long step = 0;
  double loss = 0;
  while (in >> step >> loss) losses.push_back(loss);
  return losses;
}
}  // namespace

TEST(LossAgreement, LossesAgreeAcrossRankCounts) {
  const auto one = read_losses(1);
  ASSERT_EQ(one.size(), 20u) << "the 1-rank run logged " << one.size() << " steps";
  for (double l : one) ASSERT_TRUE(std::isfinite(l) && l > 0);
  EXPECT_LT(one.back(), one.front()) << "the loss did not decrease over 20 steps";
  for (int ranks : {2, 4}) {
    const auto other = read_losses(ranks);
    ASSERT_EQ(other.size(), one.size()) << ranks << " ranks";
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_NEAR(other[i], one[i], 1e-4 * std::abs(one[i])) << ranks << " ranks, step " << i + 1;
  }
}
