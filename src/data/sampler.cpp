#include "distop/data/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "distop/core/error.hpp"
#include "distop/core/random.hpp"

namespace distop::data {

std::vector<std::int64_t> shuffled_order(std::int64_t size, std::uint64_t seed,
                                         std::uint64_t epoch) {
  DISTOP_CHECK(size >= 0, "shuffled_order", "data set size must be non-negative, got ", size);
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  // The epoch is mixed on its own before it meets the seed, so that (seed, epoch) and
  // (seed ^ 1, epoch ^ 1) and the like do not give one key.
  const std::uint64_t key = seed ^ random::mix(epoch ^ 0x6a09e667f3bcc909ULL);
  for (std::int64_t i = size - 1; i > 0; --i) {
    // The modulo's bias is below size / 2^64, far beneath anything a shuffle can show.
    const auto j = static_cast<std::int64_t>(random::bits(key, static_cast<std::uint64_t>(i)) %
                                             static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

std::vector<BatchRange> batch_ranges(std::int64_t size, std::int64_t batch_size, bool drop_last) {
  DISTOP_CHECK(size >= 0, "batch_ranges", "data set size must be non-negative, got ", size);
  DISTOP_CHECK(batch_size >= 1, "batch_ranges", "batch size must be at least 1, got ", batch_size);
  std::vector<BatchRange> ranges;
  for (std::int64_t begin = 0; begin < size; begin += batch_size) {
    const std::int64_t end = std::min(begin + batch_size, size);
    if (drop_last && end - begin < batch_size) break;
    ranges.push_back({begin, end});
  }
  return ranges;
}

BatchRange shard(const BatchRange& range, int part, int parts) {
  DISTOP_CHECK(parts >= 1 && part >= 0 && part < parts, "shard", "part ", part, " of ", parts,
               " parts is out of range; expected 0 <= part < parts");
  const std::int64_t n = range.size();
  const std::int64_t base = n / parts;
  const std::int64_t extra = n % parts;
  const std::int64_t begin = range.begin + part * base + std::min<std::int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

Sampler::Sampler(std::int64_t size, std::int64_t batch_size, SamplerOptions options)
    : size_(size), batch_size_(batch_size), options_(options) {
  DISTOP_CHECK(size >= 0, "Sampler", "data set size must be non-negative, got ", size);
  DISTOP_CHECK(batch_size >= 1, "Sampler", "batch size must be at least 1, got ", batch_size);
}

std::int64_t Sampler::num_batches() const noexcept {
  return options_.drop_last ? size_ / batch_size_ : (size_ + batch_size_ - 1) / batch_size_;
}

std::vector<std::int64_t> Sampler::order(std::uint64_t epoch) const {
  if (options_.shuffle) return shuffled_order(size_, options_.seed, epoch);
  std::vector<std::int64_t> identity(static_cast<std::size_t>(size_));
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
  return identity;
}

BatchRange Sampler::batch(std::int64_t b) const {
  DISTOP_CHECK(b >= 0 && b < num_batches(), "Sampler::batch", "batch ", b,
               " is out of range; the sampler has ", num_batches(), " batches");
  const std::int64_t begin = b * batch_size_;
  return {begin, std::min(begin + batch_size_, size_)};
}

std::vector<BatchRange> Sampler::batches() const {
  return batch_ranges(size_, batch_size_, options_.drop_last);
}

std::vector<std::int64_t> Sampler::indices(const std::vector<std::int64_t>& order,
                                           const BatchRange& batch) {
  DISTOP_CHECK(batch.begin >= 0 && batch.begin <= batch.end &&
                   batch.end <= static_cast<std::int64_t>(order.size()),
               "Sampler::indices", "batch [", batch.begin, ", ", batch.end,
               ") does not lie within an order of ", order.size(), " examples");
  return {order.begin() + batch.begin, order.begin() + batch.end};
}

}  // namespace distop::data
