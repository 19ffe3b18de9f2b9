#pragma once
// CIFAR-10 batch files for tests (no package ships the data set): records of random bytes with
// labels 0-9, written as data_batch_<i>.bin and test_batch.bin are.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "distop/core/random.hpp"
#include "distop/data/cifar.hpp"

namespace distop::test {

// `count` records: record i's label is a draw in [0, 10) and its 3072 image bytes draws in
// [0, 256), all from (seed, the byte's index), so the same arguments give the same bytes.
inline std::vector<std::uint8_t> cifar10_records(std::int64_t count, std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(count * data::kCifar10RecordBytes));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::uint64_t r = random::bits(seed, i);
    bytes[i] = static_cast<std::uint8_t>(
        i % static_cast<std::size_t>(data::kCifar10RecordBytes) == 0 ? r % 10 : r & 0xff);
  }
  return bytes;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// A CIFAR-10 directory (created if missing): data_batch_1.bin .. data_batch_5.bin of
// `train_records` records each (seeds seed + 1 .. seed + 5) and test_batch.bin of `test_records`
// (seed).
inline void write_cifar10_dir(const std::filesystem::path& dir, std::int64_t train_records,
                              std::int64_t test_records, std::uint64_t seed) {
  std::filesystem::create_directories(dir);
  for (int i = 1; i <= 5; ++i)
    write_bytes(dir / ("data_batch_" + std::to_string(i) + ".bin"),
                cifar10_records(train_records, seed + static_cast<std::uint64_t>(i)));
  write_bytes(dir / "test_batch.bin", cifar10_records(test_records, seed));
}

}  // namespace distop::test
