// Halo widths (DistDL's rule): hand-computed cases, the errors, and a brute-force cross-check
// against the taps each part's outputs actually read.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/ops/halo.hpp"

using distop::ConvWindow;
using distop::GhostWidths;
using distop::PartHalo;
using distop::Shape;

namespace {

using Widths = std::vector<std::pair<std::int64_t, std::int64_t>>;

Widths widths(std::int64_t n, std::int64_t parts, ConvWindow w) {
  Widths out;
  for (const auto& h : distop::halo_widths(n, parts, w)) out.emplace_back(h.left, h.right);
  return out;
}

std::string message_of(std::int64_t n, std::int64_t parts, ConvWindow w) {
  try {
    distop::halo_widths(n, parts, w);
  } catch (const distop::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(WindowOutputExtent, MatchesTheConvolutionFormula) {
  EXPECT_EQ(distop::window_output_extent(10, {3, 1, 1, 1}), 10);  // "same"
  EXPECT_EQ(distop::window_output_extent(10, {3, 2, 1, 1}), 5);   // 9 / 2 + 1
  EXPECT_EQ(distop::window_output_extent(10, {2, 2, 0, 1}), 5);   // pooling
  EXPECT_EQ(distop::window_output_extent(11, {2, 2, 0, 1}), 5);   // the last input is dropped
  EXPECT_EQ(distop::window_output_extent(10, {3, 1, 0, 2}), 6);   // dilated span 5
  EXPECT_EQ(distop::window_output_extent(10, {4, 1, 1, 1}), 9);   // even kernel
  EXPECT_EQ(distop::window_output_extent(3, {5, 1, 1, 1}), 1);
}

TEST(WindowOutputExtent, InvalidWindowsAreErrors) {
  EXPECT_THROW(distop::window_output_extent(10, {0, 1, 0, 1}), distop::Error);
  EXPECT_THROW(distop::window_output_extent(10, {3, 0, 0, 1}), distop::Error);
  EXPECT_THROW(distop::window_output_extent(10, {3, 1, -1, 1}), distop::Error);
  EXPECT_THROW(distop::window_output_extent(10, {3, 1, 0, 0}), distop::Error);
  EXPECT_THROW(distop::window_output_extent(2, {5, 1, 1, 1}), distop::Error);  // 2 + 2 < 5
}

TEST(HaloWidths, SameConvolutionNeedsOneEntryFromEachNeighbour) {
  // n = 10, P = 2, k = 3, p = 1: part 0 computes outputs 0..4, reading inputs [-1, 5] -> [0, 5].
  EXPECT_EQ(widths(10, 2, {3, 1, 1, 1}), (Widths{{0, 1}, {1, 0}}));
  const auto h = distop::halo_widths(10, 2, {3, 1, 1, 1});
  EXPECT_EQ(h[1].out_begin, 5);
  EXPECT_EQ(h[1].out_end, 10);
  EXPECT_EQ(h[1].need_begin, 4);
  EXPECT_EQ(h[1].need_end, 10);
  EXPECT_EQ(h[1].own_begin, 5);
  EXPECT_EQ(h[1].own_end, 10);
}

TEST(HaloWidths, StrideTwo) {
  // m = 5 outputs split [0, 3) [3, 5): part 0 reads [-1, 5], part 1 reads [5, 9].
  EXPECT_EQ(widths(10, 2, {3, 2, 1, 1}), (Widths{{0, 1}, {0, 0}}));
}

TEST(HaloWidths, PoolingGivesZerosOrSurplus) {
  // Kernel 2, stride 2 over 8: the output split lines up with the input split.
  EXPECT_EQ(widths(8, 2, {2, 2, 0, 1}), (Widths{{0, 0}, {0, 0}}));
  // Over 10: outputs [0, 3) [3, 5) read [0, 5] and [6, 9]; part 1 owns input 5 it does not read.
  EXPECT_EQ(widths(10, 2, {2, 2, 0, 1}), (Widths{{0, 1}, {-1, 0}}));
  // A stride that does not divide: 11 inputs, the last never read.
  EXPECT_EQ(widths(11, 2, {2, 2, 0, 1}), (Widths{{0, 0}, {0, -1}}));
}

TEST(HaloWidths, Dilation) {
  // k = 3, d = 2, p = 2: outputs [0, 5) read [-2, 6] -> [0, 6]; [5, 10) read [3, 11] -> [3, 9].
  EXPECT_EQ(widths(10, 2, {3, 1, 2, 2}), (Widths{{0, 2}, {2, 0}}));
}

TEST(HaloWidths, EvenKernel) {
  // k = 4, p = 1: m = 9 split [0, 5) [5, 9); part 0 reads [-1, 6], part 1 reads [4, 10] -> [4, 9].
  EXPECT_EQ(widths(10, 2, {4, 1, 1, 1}), (Widths{{0, 2}, {1, 0}}));
}

TEST(HaloWidths, ExtentNotDivisible) {
  // 11 over 3 parts: blocks [0, 4) [4, 8) [8, 11).
  EXPECT_EQ(widths(11, 3, {3, 1, 1, 1}), (Widths{{0, 1}, {1, 1}, {1, 0}}));
  // Unpadded: m = 9 split [0, 3) [3, 6) [6, 9), reading [0, 4] [3, 7] [6, 10].
  EXPECT_EQ(widths(11, 3, {3, 1, 0, 1}), (Widths{{0, 1}, {1, 0}, {2, 0}}));
}

TEST(HaloWidths, OnePartNeedsNoHalo) {
  EXPECT_EQ(widths(7, 1, {3, 1, 1, 1}), (Widths{{0, 0}}));
  // Unpadded valid convolution: the first and last inputs are read, nothing is surplus.
  EXPECT_EQ(widths(7, 1, {3, 1, 0, 1}), (Widths{{0, 0}}));
  // Stride 3 over 7 with k = 2: outputs 0, 1 read [0, 4]; inputs 5, 6 are surplus.
  EXPECT_EQ(widths(7, 1, {2, 3, 0, 1}), (Widths{{0, -2}}));
}

TEST(HaloWidths, OutputsInThePaddingNeedNothing) {
  // k = 1, p = 2 over 3 inputs: 7 outputs, the last two (and the first two) read only padding.
  // Part 2 computes outputs 5, 6, which read inputs 3, 4: padding only. It needs nothing; both
  // its widths are surplus and its trimmed extent is 0.
  const auto h = distop::halo_widths(3, 3, {1, 1, 2, 1});
  ASSERT_EQ(h.size(), 3u);
  for (const auto& p : h)
    EXPECT_EQ(p.own_end - p.own_begin + p.left + p.right, p.need_end - p.need_begin);
  EXPECT_EQ(h[2].need_begin, h[2].need_end);
  EXPECT_LE(h[2].left, 0);
  EXPECT_LE(h[2].right, 0);
}

TEST(HaloWidths, HaloBeyondTheNeighbourIsAnError) {
  // 8 inputs in 4 blocks of 2, k = 7, p = 3: part 0 computes outputs 0, 1 and reads [-3, 4],
  // three entries to its right where its neighbour owns two.
  const auto msg = message_of(8, 4, {7, 1, 3, 1});
  EXPECT_NE(msg.find("part 0 needs inputs up to 4, a right halo of 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wider than its right neighbour's block [2, 4)"), std::string::npos) << msg;
  // The same window over blocks of 3 fits.
  EXPECT_NO_THROW(distop::halo_widths(12, 4, {7, 1, 3, 1}));
}

TEST(HaloWidths, MorePartsThanInputsOrOutputsIsAnError) {
  EXPECT_NE(message_of(3, 4, {1, 1, 0, 1}).find("non-empty parts"), std::string::npos);
  // 4 inputs, k = 3 unpadded: 2 outputs over 4 parts.
  EXPECT_NE(message_of(4, 4, {3, 1, 0, 1}).find("a part would compute nothing"), std::string::npos);
  EXPECT_THROW(distop::halo_widths(4, 0, {1, 1, 0, 1}), distop::Error);
}

// Every (n, P, k, s, p, d) in a range: the part's outputs and the taps they read, enumerated
// directly, against halo_widths.
TEST(HaloWidths, BruteForceAgreesWithTheTaps) {
  int checked = 0, errors = 0;
  for (std::int64_t n = 1; n <= 13; ++n)
    for (std::int64_t parts = 1; parts <= 5; ++parts)
      for (std::int64_t k = 1; k <= 5; ++k)
        for (std::int64_t s = 1; s <= 3; ++s)
          for (std::int64_t p = 0; p <= 3; ++p)
            for (std::int64_t d = 1; d <= 3; ++d) {
              const ConvWindow w{k, s, p, d};
              SCOPED_TRACE(testing::Message() << "n " << n << " P " << parts << " " << w.str());
              // Outputs: every window whose last tap lies inside the padded input.
              std::int64_t m = 0;
              while (m * s - p + d * (k - 1) <= n - 1 + p) ++m;
              if (m == 0 || parts > n || parts > m) {
                EXPECT_THROW(distop::halo_widths(n, parts, w), distop::Error);
                ++errors;
                continue;
              }
              EXPECT_EQ(distop::window_output_extent(n, w), m);
              const auto in = distop::balanced_bounds(n, parts);
              const auto out = distop::balanced_bounds(m, parts);
              struct Need {
                std::int64_t lo, hi;  // clipped hull, half-open; lo == hi when empty
                std::set<std::int64_t> reads;
              };
              std::vector<Need> need;
              bool beyond = false;
              for (std::int64_t c = 0; c < parts; ++c) {
                std::int64_t lo = INT64_MAX, hi = INT64_MIN;
                std::set<std::int64_t> reads;
                for (std::int64_t o = out[c]; o < out[c + 1]; ++o)
                  for (std::int64_t j = 0; j < k; ++j) {
                    const std::int64_t i = o * s - p + j * d;
                    lo = std::min(lo, i);
                    hi = std::max(hi, i);
                    if (i >= 0 && i < n) reads.insert(i);
                  }
                lo = std::max<std::int64_t>(lo, 0);
                hi = std::min<std::int64_t>(hi + 1, n);
                if (lo >= hi) lo = hi = -1;  // empty
                if (lo >= 0 && c > 0 && lo < in[c - 1]) beyond = true;
                if (hi >= 0 && c + 1 < parts && hi > in[c + 2]) beyond = true;
                need.push_back({lo, hi, std::move(reads)});
              }
              if (beyond) {
                EXPECT_THROW(distop::halo_widths(n, parts, w), distop::Error);
                ++errors;
                continue;
              }
              const auto h = distop::halo_widths(n, parts, w);
              ASSERT_EQ(static_cast<std::int64_t>(h.size()), parts);
              for (std::int64_t c = 0; c < parts; ++c) {
                const auto& x = h[c];
                EXPECT_EQ(x.own_begin, in[c]);
                EXPECT_EQ(x.own_end, in[c + 1]);
                EXPECT_EQ(x.out_begin, out[c]);
                EXPECT_EQ(x.out_end, out[c + 1]);
                if (need[c].lo < 0) {
                  EXPECT_EQ(x.need_begin, x.need_end);
                  EXPECT_LE(x.left, 0);
                  EXPECT_LE(x.right, 0);
                } else {
                  EXPECT_EQ(x.need_begin, need[c].lo);
                  EXPECT_EQ(x.need_end, need[c].hi);
                  EXPECT_EQ(x.left, in[c] - need[c].lo);
                  EXPECT_EQ(x.right, need[c].hi - in[c + 1]);
                }
                EXPECT_EQ(x.own_end - x.own_begin + x.left + x.right, x.need_end - x.need_begin);
                // The exchanged block (own block plus the non-negative widths) holds every read.
                const std::int64_t have_lo = x.own_begin - std::max<std::int64_t>(x.left, 0);
                const std::int64_t have_hi = x.own_end + std::max<std::int64_t>(x.right, 0);
                for (auto i : need[c].reads) {
                  EXPECT_GE(i, x.need_begin);
                  EXPECT_LT(i, x.need_end);
                  EXPECT_GE(i, have_lo);
                  EXPECT_LT(i, have_hi);
                }
                // Only a neighbour's data is needed: never beyond the adjacent blocks.
                EXPECT_GE(have_lo, in[std::max<std::int64_t>(c - 1, 0)]);
                EXPECT_LE(have_hi, in[std::min<std::int64_t>(c + 2, parts)]);
              }
              ++checked;
            }
  // Both outcomes are exercised.
  EXPECT_GT(checked, 1000);
  EXPECT_GT(errors, 100);
}

TEST(HaloSpec, ClampsSurplusToZeroPerAxis) {
  // Axis 0: the "same" convolution of the first case; axis 1: pooling with surplus; axis 2 unsplit.
  const auto spec = distop::halo_spec(Shape{10, 10, 5}, Shape{2, 2, 1},
                                      {{3, 1, 1, 1}, {2, 2, 0, 1}, {3, 1, 1, 1}});
  ASSERT_EQ(spec.size(), 3u);
  EXPECT_EQ(spec[0], (std::vector<GhostWidths>{{0, 1}, {1, 0}}));
  EXPECT_EQ(spec[1], (std::vector<GhostWidths>{{0, 1}, {0, 0}}));
  EXPECT_EQ(spec[2], (std::vector<GhostWidths>{{0, 0}}));
}

TEST(HaloSpec, ErrorsNameTheAxis) {
  EXPECT_THROW(distop::halo_spec(Shape{10, 10}, Shape{2}, {{3, 1, 1, 1}}), distop::Error);
  EXPECT_THROW(distop::halo_spec(Shape{10}, Shape{2}, {{3, 1, 1, 1}, {3, 1, 1, 1}}), distop::Error);
  try {
    distop::halo_spec(Shape{10, 8}, Shape{1, 4}, {{3, 1, 1, 1}, {7, 1, 3, 1}});
    ADD_FAILURE() << "accepted a halo wider than the neighbour's block";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor axis 1"), std::string::npos) << e.what();
  }
}
