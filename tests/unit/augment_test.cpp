// The augmentations of contrastive learning: a view is a pure function of (seed, epoch, sample,
// view); the crop of the whole image is the identity; flipping twice is the identity; the crop's
// statistics and bounds; bilinear resizing and the jitter against hand-computed values; bad
// options.
#include "distop/data/augment.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "distop/core/error.hpp"

namespace {

using distop::data::AugmentOptions;
using distop::data::CropBox;
namespace data = distop::data;

std::vector<float> test_image(std::int64_t channels, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(channels * rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37 % 101) / 100.0);
  return v;
}

std::vector<float> view_of(const std::vector<float>& img, std::uint64_t seed, std::uint64_t epoch,
                           std::uint64_t sample, std::uint64_t view, const AugmentOptions& o = {}) {
  std::vector<float> out(img.size());
  data::augment(img.data(), 1, 28, 28, out.data(), seed, epoch, sample, view, o);
  return out;
}

TEST(Augment, AViewIsAPureFunctionOfSeedEpochSampleAndView) {
  const auto img = test_image(1, 28, 28);
  const auto a = view_of(img, 7, 3, 1234, 0);
  // Drawn again, after other views were drawn, gives the same bits.
  (void)view_of(img, 7, 3, 99, 1);
  EXPECT_EQ(view_of(img, 7, 3, 1234, 0), a);
  // Each of the four keys changes the view.
  EXPECT_NE(view_of(img, 8, 3, 1234, 0), a);
  EXPECT_NE(view_of(img, 7, 4, 1234, 0), a);
  EXPECT_NE(view_of(img, 7, 3, 1235, 0), a);
  EXPECT_NE(view_of(img, 7, 3, 1234, 1), a);
}

TEST(Augment, ViewsDoNotDependOnHowSamplesAreSplitOverRanks) {
  // A batch of 12 samples drawn whole (one rank) and as 2 and 3 interleaved shares (the
  // DistributedSampler's split over replicas), each share in its own order: the same views.
  const std::int64_t n = 12, px = 28 * 28;
  std::vector<float> images;
  for (std::int64_t s = 0; s < n; ++s) {
    auto img = test_image(1, 28, 28);
    for (auto& v : img) v = std::fmod(v + 0.01f * static_cast<float>(s), 1.0f);
    images.insert(images.end(), img.begin(), img.end());
  }
  auto views_split = [&](int parts) {
    std::vector<float> out(images.size() * 2);
    for (int p = parts - 1; p >= 0; --p)  // the last share first: order must not matter
      for (std::int64_t s = p; s < n; s += parts)
        for (std::uint64_t view = 0; view < 2; ++view)
          data::augment(images.data() + s * px, 1, 28, 28,
                        out.data() + (static_cast<std::int64_t>(view) * n + s) * px, 5, 2,
                        static_cast<std::uint64_t>(100 + s), view);
    return out;
  };
  const auto one = views_split(1);
  EXPECT_EQ(views_split(2), one);
  EXPECT_EQ(views_split(3), one);
}

TEST(Augment, CropOfTheWholeImageIsTheIdentity) {
  for (std::int64_t channels : {1, 3}) {
    const auto img = test_image(channels, 28, 20);
    std::vector<float> out(img.size(), -1.0f);
    data::resized_crop(img.data(), channels, 28, 20, CropBox{0, 0, 28, 20}, out.data(), 28, 20);
    EXPECT_EQ(out, img);
  }
  // With no crop range left, no flip and no noise, augment is the identity.
  AugmentOptions o;
  o.crop_scale_min = o.crop_scale_max = 1.0;
  o.crop_ratio_min = o.crop_ratio_max = 1.0;
  o.flip_probability = 0.0;
  o.jitter_probability = 0.0;
  o.noise_std = 0.0;
  const auto img = test_image(1, 28, 28);
  EXPECT_EQ(view_of(img, 1, 0, 5, 0, o), img);
}

TEST(Augment, FlipTwiceIsTheIdentity) {
  auto img = test_image(3, 5, 7);
  const auto original = img;
  data::flip_horizontal(img.data(), 3, 5, 7);
  EXPECT_NE(img, original);
  EXPECT_EQ(img[0], original[6]);  // row 0's first value is its last
  EXPECT_EQ(img[7 * 5 + 1], original[7 * 5 + 5]);
  data::flip_horizontal(img.data(), 3, 5, 7);
  EXPECT_EQ(img, original);
}

TEST(Augment, BilinearResizeOfACrop) {
  // A 4 x 4 ramp v(r, c) = 10 r + c. Its 2 x 2 crop at (1, 1) resized to 4 x 4 samples source
  // rows 1 + (i + 0.5) / 2 - 0.5 = 0.75 + i / 2 clamped to [1, 2]: 1, 1.25, 1.75, 2. Bilinear
  // interpolation reproduces a linear function exactly.
  std::vector<float> img(16);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) img[static_cast<std::size_t>(r * 4 + c)] = 10.0f * r + c;
  std::vector<float> out(16);
  data::resized_crop(img.data(), 1, 4, 4, CropBox{1, 1, 2, 2}, out.data(), 4, 4);
  const float at[4] = {1.0f, 1.25f, 1.75f, 2.0f};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_NEAR(out[static_cast<std::size_t>(i * 4 + j)], 10.0f * at[i] + at[j], 1e-5)
          << i << ", " << j;
}

TEST(Augment, CropsFitTheImageAndFollowTheScaleRange) {
  AugmentOptions o;
  double area = 0, smallest = 1, largest = 0;
  const int n = 2000;
  int flips = 0;
  for (int s = 0; s < n; ++s) {
    const auto p =
        data::sample_view(data::view_stream(3, 0, static_cast<std::uint64_t>(s), 0), 28, 28, o);
    ASSERT_GT(p.crop.height, 0);
    ASSERT_GT(p.crop.width, 0);
    ASSERT_GE(p.crop.top, 0);
    ASSERT_GE(p.crop.left, 0);
    ASSERT_LE(p.crop.top + p.crop.height, 28);
    ASSERT_LE(p.crop.left + p.crop.width, 28);
    const double frac = static_cast<double>(p.crop.height * p.crop.width) / (28.0 * 28.0);
    // Rounding each side to whole pixels moves the area a little outside the range.
    EXPECT_GT(frac, 0.25 * 0.8);
    EXPECT_LE(frac, 1.0);
    area += frac;
    smallest = std::min(smallest, frac);
    largest = std::max(largest, frac);
    flips += p.flip ? 1 : 0;
  }
  // The area fraction is drawn uniformly in [0.25, 1], but large crops of a stretched aspect ratio
  // do not fit and are drawn again (torchvision's rejection), so the mean is below (0.25 + 1) / 2.
  EXPECT_GT(area / n, 0.5);
  EXPECT_LT(area / n, 0.625);
  EXPECT_LT(smallest, 0.27);
  EXPECT_GT(largest, 0.95);
  EXPECT_NEAR(static_cast<double>(flips) / n, 0.5, 0.05);
}

TEST(Augment, NoiseHasTheRequestedSpread) {
  AugmentOptions o;
  o.crop_scale_min = o.crop_scale_max = 1.0;
  o.crop_ratio_min = o.crop_ratio_max = 1.0;
  o.flip_probability = 0.0;
  o.jitter_probability = 0.0;
  o.noise_std = 0.1;
  const auto img = test_image(1, 28, 28);
  const auto v = view_of(img, 1, 0, 5, 0, o);
  double sum = 0, sq = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double d = v[i] - img[i];
    sum += d;
    sq += d * d;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sq / n), 0.1, 0.01);
}

TEST(Augment, JitterScalesBrightnessAndBlendsWithTheMean) {
  // Values 0.2 and 0.6: brightness 1.5 gives 0.3 and 0.9 (mean 0.6); contrast 0.5 blends each
  // halfway to the mean: 0.45 and 0.75. A brightness pushing values past 1 clamps them.
  std::vector<float> v{0.2f, 0.6f};
  data::jitter(v.data(), 2, 1.5f, 0.5f);
  EXPECT_NEAR(v[0], 0.45f, 1e-6);
  EXPECT_NEAR(v[1], 0.75f, 1e-6);
  std::vector<float> w{0.5f, 0.9f};
  data::jitter(w.data(), 2, 2.0f, 1.0f);
  EXPECT_EQ(w, (std::vector<float>{1.0f, 1.0f}));
  // With the default options, about jitter_probability of the views are jittered, with factors
  // in range.
  int jittered = 0;
  for (int s = 0; s < 1000; ++s) {
    const auto p = data::sample_view(data::view_stream(3, 1, static_cast<std::uint64_t>(s), 1), 28,
                                     28, AugmentOptions{});
    if (!p.jitter) continue;
    ++jittered;
    EXPECT_GE(p.brightness, 0.6f);
    EXPECT_LE(p.brightness, 1.4f);
    EXPECT_GE(p.contrast, 0.6f);
    EXPECT_LE(p.contrast, 1.4f);
  }
  EXPECT_NEAR(jittered / 1000.0, 0.8, 0.05);
}

TEST(Augment, BadOptionsAndCropsAreErrors) {
  const auto img = test_image(1, 28, 28);
  std::vector<float> out(img.size());
  AugmentOptions o;
  o.crop_scale_min = 0.0;
  EXPECT_THROW(view_of(img, 1, 0, 0, 0, o), distop::Error);
  o = {};
  o.crop_scale_max = 1.5;
  EXPECT_THROW(view_of(img, 1, 0, 0, 0, o), distop::Error);
  o = {};
  o.crop_ratio_min = 2.0;
  EXPECT_THROW(view_of(img, 1, 0, 0, 0, o), distop::Error);
  o = {};
  o.brightness = 1.5;
  EXPECT_THROW(view_of(img, 1, 0, 0, 0, o), distop::Error);
  o = {};
  o.noise_std = -1.0;
  EXPECT_THROW(view_of(img, 1, 0, 0, 0, o), distop::Error);
  EXPECT_THROW(data::resized_crop(img.data(), 1, 28, 28, CropBox{20, 0, 10, 5}, out.data(), 28, 28),
               distop::Error);
}

}  // namespace
