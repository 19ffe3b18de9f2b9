#pragma once
// A deterministic, seeded shuffling sampler: the order of a data set in each epoch, identical on
// every rank that asks with the same seed and epoch, cut into batches.

#include <cstdint>
#include <vector>

namespace distop::data {

// A half-open range [begin, end) of positions in an epoch's order.
struct BatchRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  std::int64_t size() const noexcept { return end - begin; }
  friend bool operator==(const BatchRange&, const BatchRange&) = default;
};

// A permutation of [0, size), a function of (size, seed, epoch) only: a Fisher-Yates shuffle whose
// draws are distop::random::bits of a key mixed from seed and epoch, so every rank computes the
// same order without communicating. Throws distop::Error (op "shuffled_order") if size < 0.
std::vector<std::int64_t> shuffled_order(std::int64_t size, std::uint64_t seed,
                                         std::uint64_t epoch);

// The consecutive batches of `batch_size` positions covering [0, size); the last one is smaller
// when batch_size does not divide size, or left out when drop_last. Throws distop::Error (op
// "batch_ranges") if size < 0 or batch_size < 1.
std::vector<BatchRange> batch_ranges(std::int64_t size, std::int64_t batch_size, bool drop_last);

// Part `part` of `parts` near-equal contiguous pieces of `range` (the first size % parts pieces are
// one longer), for splitting a global batch among data-parallel ranks. Throws distop::Error (op
// "shard") unless 0 <= part < parts.
BatchRange shard(const BatchRange& range, int part, int parts);

struct SamplerOptions {
  bool shuffle = true;     // false: every epoch's order is the identity
  bool drop_last = false;  // leave out a last batch smaller than batch_size
  std::uint64_t seed = 0;
};

// Cuts a data set of `size` examples into batches of `batch_size`, in an order that is shuffled
// anew each epoch (see shuffled_order) or the identity. Immutable; cheap to copy.
class Sampler {
 public:
  // Throws distop::Error (op "Sampler") if size < 0 or batch_size < 1.
  Sampler(std::int64_t size, std::int64_t batch_size, SamplerOptions options = {});

  std::int64_t size() const noexcept { return size_; }
  std::int64_t batch_size() const noexcept { return batch_size_; }
  const SamplerOptions& options() const noexcept { return options_; }
  // The number of batches per epoch.
  std::int64_t num_batches() const noexcept;
  // The examples the epoch visits, in order: a permutation of [0, size).
  std::vector<std::int64_t> order(std::uint64_t epoch) const;
  // Batch b's positions in order(epoch); throws distop::Error unless 0 <= b < num_batches().
  BatchRange batch(std::int64_t b) const;
  // All batches of an epoch (the same for every epoch).
  std::vector<BatchRange> batches() const;
  // The example indices of batch b of an epoch, given that epoch's order().
  static std::vector<std::int64_t> indices(const std::vector<std::int64_t>& order,
                                           const BatchRange& batch);

 private:
  std::int64_t size_;
  std::int64_t batch_size_;
  SamplerOptions options_;
};

}  // namespace distop::data
