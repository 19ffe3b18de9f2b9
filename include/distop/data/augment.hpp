#pragma once
// Image augmentations for contrastive learning (SimCLR's views): a random resized crop resized
// back bilinearly, a horizontal flip, a brightness and contrast jitter (SimCLR's colour
// distortion for grey images) and additive Gaussian noise, each drawn from a counter-based
// stream keyed by (seed, epoch, sample, view). A sample's views therefore depend only on those four
// numbers: never on the rank that draws them, the rank or replica count, the batch the sample is
// in or the order in which views are drawn.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "distop/core/error.hpp"
#include "distop/core/random.hpp"

namespace distop::data {

// The augmentation's parameters. Defaults suit 28 x 28 grey images (Fashion-MNIST).
struct AugmentOptions {
  // RandomResizedCrop (torchvision's definition): the crop's area as a fraction of the image's,
  // uniform in [crop_scale_min, crop_scale_max], and its aspect ratio width / height,
  // log-uniform in [crop_ratio_min, crop_ratio_max].
  double crop_scale_min = 0.25;
  double crop_scale_max = 1.0;
  double crop_ratio_min = 3.0 / 4.0;
  double crop_ratio_max = 4.0 / 3.0;
  double flip_probability = 0.5;  // of mirroring the columns
  // torchvision's ColorJitter(brightness, contrast), applied with probability jitter_probability:
  // every value times a brightness factor uniform in [1 - brightness, 1 + brightness], then
  // mixed with the image's mean by a contrast factor c uniform in [1 - contrast, 1 + contrast]
  // (x -> c x + (1 - c) mean), then clamped to [0, 1]. Without it, two crops of an image share
  // their intensity histogram, a shortcut that the contrastive task can be solved by (SimCLR's
  // finding for colour).
  double jitter_probability = 0.8;
  double brightness = 0.4;
  double contrast = 0.4;
  double noise_std = 0.05;  // of the Gaussian noise added to every value (0: none)
};

// A crop: rows [top, top + height), columns [left, left + width) of the image.
struct CropBox {
  std::int64_t top = 0, left = 0, height = 0, width = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

// What one view draws: its crop box, whether it is flipped, and the stream of its noise.
struct ViewParams {
  CropBox crop;
  bool flip = false;
  bool jitter = false;
  float brightness = 1, contrast = 1;  // the jitter's factors (1, 1 without jitter)
  std::uint64_t noise_stream = 0;
};

// Throws distop::Error (op "augment") unless 0 < crop_scale_min <= crop_scale_max <= 1,
// 0 < crop_ratio_min <= crop_ratio_max, flip_probability and jitter_probability in [0, 1],
// brightness and contrast in [0, 1], and noise_std >= 0 (all finite).
inline void check_augment_options(const AugmentOptions& o) {
  DISTOP_CHECK(std::isfinite(o.crop_scale_min) && std::isfinite(o.crop_scale_max) &&
                   o.crop_scale_min > 0 && o.crop_scale_min <= o.crop_scale_max &&
                   o.crop_scale_max <= 1,
               "augment", "the crop scale range must satisfy 0 < min <= max <= 1, found [",
               o.crop_scale_min, ", ", o.crop_scale_max, "]");
  DISTOP_CHECK(std::isfinite(o.crop_ratio_min) && std::isfinite(o.crop_ratio_max) &&
                   o.crop_ratio_min > 0 && o.crop_ratio_min <= o.crop_ratio_max,
               "augment", "the crop aspect-ratio range must satisfy 0 < min <= max, found [",
               o.crop_ratio_min, ", ", o.crop_ratio_max, "]");
  DISTOP_CHECK(o.flip_probability >= 0 && o.flip_probability <= 1, "augment",
               "the flip probability must be in [0, 1], found ", o.flip_probability);
  DISTOP_CHECK(o.jitter_probability >= 0 && o.jitter_probability <= 1, "augment",
               "the jitter probability must be in [0, 1], found ", o.jitter_probability);
  DISTOP_CHECK(o.brightness >= 0 && o.brightness <= 1 && o.contrast >= 0 && o.contrast <= 1,
               "augment", "the brightness and contrast jitter must be in [0, 1], found ",
               o.brightness, " and ", o.contrast);
  DISTOP_CHECK(std::isfinite(o.noise_std) && o.noise_std >= 0, "augment",
               "the noise standard deviation must be finite and >= 0, found ", o.noise_std);
}

// The stream of view `view` of sample `sample` (its index in the data set) in epoch `epoch` of a
// run with seed `seed`: a 64-bit key that every draw of the view derives from.
inline std::uint64_t view_stream(std::uint64_t seed, std::uint64_t epoch, std::uint64_t sample,
                                 std::uint64_t view) noexcept {
  return random::bits(random::bits(random::bits(seed, epoch), sample), view);
}

// torchvision's RandomResizedCrop.get_params on a rows x cols image: up to 10 attempts at an area
// and an aspect ratio drawn as AugmentOptions says, the first whose rounded box fits taken at a
// uniform position; otherwise the central crop of the aspect ratio clamped to the range.
inline CropBox sample_crop(std::uint64_t stream, std::int64_t rows, std::int64_t cols,
                           const AugmentOptions& o) {
  const double area = static_cast<double>(rows * cols);
  const double log_lo = std::log(o.crop_ratio_min), log_hi = std::log(o.crop_ratio_max);
  std::uint64_t k = 0;
  auto uniform = [&] { return random::uniform(stream, k++); };
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target =
        area * (o.crop_scale_min + (o.crop_scale_max - o.crop_scale_min) * uniform());
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * uniform());
    const auto w = static_cast<std::int64_t>(std::lround(std::sqrt(target * ratio)));
    const auto h = static_cast<std::int64_t>(std::lround(std::sqrt(target / ratio)));
    const double u_top = uniform(), u_left = uniform();
    if (w > 0 && w <= cols && h > 0 && h <= rows) {
      const auto top = std::min(rows - h, static_cast<std::int64_t>(u_top * (rows - h + 1)));
      const auto left = std::min(cols - w, static_cast<std::int64_t>(u_left * (cols - w + 1)));
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(cols) / static_cast<double>(rows);
  std::int64_t w = cols, h = rows;
  if (in_ratio < o.crop_ratio_min) {
    h = std::lround(static_cast<double>(w) / o.crop_ratio_min);
  } else if (in_ratio > o.crop_ratio_max) {
    w = std::lround(static_cast<double>(h) * o.crop_ratio_max);
  }
  return {(rows - h) / 2, (cols - w) / 2, h, w};
}

// Everything view `stream` draws (the crop from its own sub-stream, the flip, the noise's
// sub-stream, the jitter).
inline ViewParams sample_view(std::uint64_t stream, std::int64_t rows, std::int64_t cols,
                              const AugmentOptions& o) {
  ViewParams p;
  p.crop = sample_crop(random::bits(stream, 0), rows, cols, o);
  p.flip = random::uniform(stream, 1) < o.flip_probability;
  p.noise_stream = random::bits(stream, 2);
  p.jitter = random::uniform(stream, 3) < o.jitter_probability;
  if (p.jitter) {
    p.brightness =
        static_cast<float>(1 - o.brightness + 2 * o.brightness * random::uniform(stream, 4));
    p.contrast = static_cast<float>(1 - o.contrast + 2 * o.contrast * random::uniform(stream, 5));
  }
  return p;
}

// Brightness then contrast (see AugmentOptions), clamped to [0, 1], on `n` values in place.
inline void jitter(float* img, std::int64_t n, float brightness, float contrast) noexcept {
  double mean = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    img[i] = std::clamp(img[i] * brightness, 0.0f, 1.0f);
    mean += static_cast<double>(img[i]);
  }
  const auto m = static_cast<float>(mean / static_cast<double>(std::max<std::int64_t>(n, 1)));
  for (std::int64_t i = 0; i < n; ++i)
    img[i] = std::clamp(contrast * img[i] + (1 - contrast) * m, 0.0f, 1.0f);
}

// Crops `box` out of the channels x rows x cols image `src` (channel-major) and resizes it to
// channels x out_rows x out_cols into `dst` by bilinear interpolation with half-pixel centres
// (PyTorch's interpolate(mode="bilinear", align_corners=False) without antialiasing): output pixel
// (i, j) samples the crop at (top + (i + 0.5) h / out_rows - 0.5, left + (j + 0.5) w / out_cols -
// 0.5), clamped to the crop. The whole image at its own size is copied exactly. `dst` must not
// overlap `src`.
inline void resized_crop(const float* src, std::int64_t channels, std::int64_t rows,
                         std::int64_t cols, const CropBox& box, float* dst, std::int64_t out_rows,
                         std::int64_t out_cols) {
  DISTOP_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                   box.top + box.height <= rows && box.left + box.width <= cols,
               "resized_crop", "the crop [", box.top, ", ", box.top + box.height, ") x [", box.left,
               ", ", box.left + box.width, ") does not fit a ", rows, " x ", cols, " image");
  // One axis: the two source indices and the weight of the second, for each output index.
  struct Tap {
    std::int64_t i0, i1;
    float w1;
  };
  auto taps = [](std::int64_t first, std::int64_t extent, std::int64_t out, Tap* t) {
    const double step = static_cast<double>(extent) / static_cast<double>(out);
    for (std::int64_t i = 0; i < out; ++i) {
      double s = (static_cast<double>(i) + 0.5) * step - 0.5;
      s = std::clamp(s, 0.0, static_cast<double>(extent - 1));
      const auto lo = static_cast<std::int64_t>(std::floor(s));
      const std::int64_t hi = std::min(lo + 1, extent - 1);
      t[i] = {first + lo, first + hi, static_cast<float>(s - static_cast<double>(lo))};
    }
  };
  constexpr std::int64_t kMaxExtent = 512;
  DISTOP_CHECK(out_rows > 0 && out_cols > 0 && out_rows <= kMaxExtent && out_cols <= kMaxExtent,
               "resized_crop", "the output must be between 1 x 1 and ", kMaxExtent, " x ",
               kMaxExtent, ", found ", out_rows, " x ", out_cols);
  Tap ty[kMaxExtent], tx[kMaxExtent];
  taps(box.top, box.height, out_rows, ty);
  taps(box.left, box.width, out_cols, tx);
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* s = src + c * rows * cols;
    float* d = dst + c * out_rows * out_cols;
    for (std::int64_t i = 0; i < out_rows; ++i) {
      const float* r0 = s + ty[i].i0 * cols;
      const float* r1 = s + ty[i].i1 * cols;
      const float wy = ty[i].w1;
      for (std::int64_t j = 0; j < out_cols; ++j) {
        const float top = r0[tx[j].i0] + tx[j].w1 * (r0[tx[j].i1] - r0[tx[j].i0]);
        const float bottom = r1[tx[j].i0] + tx[j].w1 * (r1[tx[j].i1] - r1[tx[j].i0]);
        d[i * out_cols + j] = top + wy * (bottom - top);
      }
    }
  }
}

// Mirrors the columns of each channel of a channels x rows x cols image in place.
inline void flip_horizontal(float* img, std::int64_t channels, std::int64_t rows,
                            std::int64_t cols) noexcept {
  for (std::int64_t r = 0; r < channels * rows; ++r)
    std::reverse(img + r * cols, img + r * cols + cols);
}

// Writes view `view` of a channels x rows x cols image `src` (sample `sample` of the data set) in
// epoch `epoch` of a run seeded `seed` into `dst` (same shape, not overlapping `src`): the random
// resized crop back to rows x cols, the flip with probability flip_probability, the jitter with
// probability jitter_probability, then noise_std
// times a standard normal added to each value (value i of the view drawing element i of the
// view's noise stream). A pure function of its arguments. Errors as check_augment_options.
inline void augment(const float* src, std::int64_t channels, std::int64_t rows, std::int64_t cols,
                    float* dst, std::uint64_t seed, std::uint64_t epoch, std::uint64_t sample,
                    std::uint64_t view, const AugmentOptions& o = {}) {
  check_augment_options(o);
  const ViewParams p = sample_view(view_stream(seed, epoch, sample, view), rows, cols, o);
  resized_crop(src, channels, rows, cols, p.crop, dst, rows, cols);
  if (p.flip) flip_horizontal(dst, channels, rows, cols);
  if (p.jitter) jitter(dst, channels * rows * cols, p.brightness, p.contrast);
  if (o.noise_std > 0) {
    const std::int64_t n = channels * rows * cols;
    for (std::int64_t i = 0; i < n; ++i)
      dst[i] += static_cast<float>(o.noise_std *
                                   random::normal(p.noise_stream, static_cast<std::uint64_t>(i)));
  }
}

}  // namespace distop::data
