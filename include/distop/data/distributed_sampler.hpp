#pragma once
// DistributedSampler: each data-parallel replica's share of an epoch, with
// torch.utils.data.DistributedSampler's definition.

#include <cstdint>
#include <vector>

namespace distop::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  // Leave out the tail that does not fill one entry per replica, instead of padding.
  bool drop_last = false;
  std::uint64_t seed = 0;
};

// Splits an epoch of a data set of `size` examples among `replicas` replicas, as torch's
// DistributedSampler does:
//   order      = shuffled_order(size, seed, epoch) (a permutation that depends only on the seed
//                and the epoch, the same on every rank), or the identity without shuffle;
//   num_samples = ceil(size / R), or with drop_last (when R does not divide size)
//                 ceil((size - R) / R) = floor(size / R);
//   total_size = num_samples * R: without drop_last the order is padded by repeating its head
//                (as often as needed) to total_size entries; with drop_last it is cut to them;
//   replica r takes entries r, r + R, r + 2R, ... of that list.
// So every replica gets num_samples examples, and their union is the whole epoch (with the
// padding's repeats, or less the dropped tail). Immutable but for the epoch; cheap to copy.
class DistributedSampler {
 public:
  // Throws distop::Error (op "DistributedSampler") unless size >= 0, replicas >= 1 and
  // 0 <= replica < replicas.
  DistributedSampler(std::int64_t size, int replicas, int replica,
                     DistributedSamplerOptions options = {});

  // torch's set_epoch: the epoch whose order indices() follows.
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  std::int64_t num_samples() const noexcept { return num_samples_; }
  std::int64_t total_size() const noexcept { return num_samples_ * replicas_; }
  int replicas() const noexcept { return replicas_; }
  int replica() const noexcept { return replica_; }

  // The padded (or cut) order of the epoch, total_size() entries: every replica's share
  // interleaved.
  std::vector<std::int64_t> padded_order() const;
  // This replica's examples in the epoch: entries replica, replica + R, ... of padded_order().
  std::vector<std::int64_t> indices() const;
  // Whether entry k of indices() is padding (a repeat of the head, so that evaluation can count
  // each example once): its position replica + k R in padded_order() is at or past size.
  bool is_padding(std::int64_t k) const noexcept { return replica_ + k * replicas_ >= size_; }

 private:
  std::int64_t size_;
  int replicas_;
  int replica_;
  DistributedSamplerOptions options_;
  std::int64_t num_samples_;
  std::uint64_t epoch_ = 0;
};

}  // namespace distop::data
