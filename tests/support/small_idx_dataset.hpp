#pragma once
// A small Fashion-MNIST-like data set of random 28 x 28 images written as IDX files, for example
// tests whose point is not the data: each run then loads and evaluates in milliseconds.

#include <cstdint>
#include <filesystem>
#include <string>

#include "distop/core/random.hpp"
#include "distop/data/idx.hpp"

namespace distop::test {

// Writes train-images/labels (`train_size` images) and t10k-images/labels (64) into `dir`
// (created): pixel bytes from distop::random::bits, labels 0, 1, ..., 9, 0, ...; returns `dir`.
inline std::filesystem::path write_small_idx_dataset(const std::filesystem::path& dir,
                                                     std::int64_t train_size = 256) {
  std::filesystem::create_directories(dir);
  for (const bool train : {true, false}) {
    const std::int64_t n = train ? train_size : 64;
    data::IdxArray images{{n, 28, 28}, {}}, labels{{n}, {}};
    for (std::int64_t i = 0; i < n * 28 * 28; ++i)
      images.data.push_back(
          static_cast<std::uint8_t>(random::bits(train, static_cast<std::uint64_t>(i))));
    for (std::int64_t i = 0; i < n; ++i) labels.data.push_back(static_cast<std::uint8_t>(i % 10));
    const std::string stem = train ? "train" : "t10k";
    data::write_idx((dir / (stem + "-images-idx3-ubyte")).string(), images, false);
    data::write_idx((dir / (stem + "-labels-idx1-ubyte")).string(), labels, false);
  }
  return dir;
}

}  // namespace distop::test
