#pragma once
// An in-memory data set for tests of batch loading: every pixel value is known from its index.

#include <cstdint>
#include <utility>
#include <vector>

#include "distop/data/idx.hpp"

namespace distop::test {

// `size` images of channels x rows x cols whose values, in storage order over the whole data set
// (row-major [size, channels, rows, cols]), are 0, step, 2 * step, ...; `labels` has `size` entries.
inline data::Dataset ramp_dataset(std::int64_t size, std::int64_t channels, std::int64_t rows,
                                  std::int64_t cols, float step, std::vector<std::int32_t> labels) {
  data::Dataset d;
  d.size = size;
  d.channels = channels;
  d.rows = rows;
  d.cols = cols;
  for (std::int64_t i = 0; i < d.size * d.pixels(); ++i)
    d.images.push_back(static_cast<float>(i) * step);
  d.labels = std::move(labels);
  return d;
}

}  // namespace distop::test
