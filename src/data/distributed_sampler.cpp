#include "distop/data/distributed_sampler.hpp"

#include <numeric>

#include "distop/core/error.hpp"
#include "distop/data/sampler.hpp"

namespace distop::data {

DistributedSampler::DistributedSampler(std::int64_t size, int replicas, int replica,
                                       DistributedSamplerOptions options)
    : size_(size), replicas_(replicas), replica_(replica), options_(options) {
  DISTOP_CHECK(size >= 0, "DistributedSampler", "data set size must be non-negative, got ", size);
  DISTOP_CHECK(replicas >= 1 && replica >= 0 && replica < replicas, "DistributedSampler",
               "replica ", replica, " of ", replicas,
               " is out of range; expected replicas >= 1 and 0 <= replica < replicas");
  const std::int64_t r = replicas;
  num_samples_ = options.drop_last && size % r != 0 ? (size - r + r - 1) / r  // ceil((N - R) / R)
                                                    : (size + r - 1) / r;     // ceil(N / R)
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<std::int64_t> DistributedSampler::padded_order() const {
  std::vector<std::int64_t> order;
  if (options_.shuffle) {
    order = shuffled_order(size_, options_.seed, epoch_);
  } else {
    order.resize(static_cast<std::size_t>(size_));
    std::iota(order.begin(), order.end(), std::int64_t{0});
  }
  const auto total = static_cast<std::size_t>(total_size());
  if (order.size() >= total) {
    order.resize(total);
  } else if (!order.empty()) {
    // The head again, as often as it takes (torch: indices += (indices * ceil(pad / len))[:pad]).
    const std::size_t n = order.size();
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  }
  return order;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const auto order = padded_order();
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::size_t k = static_cast<std::size_t>(replica_); k < order.size();
       k += static_cast<std::size_t>(replicas_))
    mine.push_back(order[k]);
  return mine;
}

}  // namespace distop::data
