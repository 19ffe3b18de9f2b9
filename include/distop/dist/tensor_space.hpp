#pragma once
// TensorSpace: a global shape, a partition and a decomposition.

#include <memory>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/partition.hpp"

namespace distop {

// The space of a distributed tensor: the direct sum of the boxes that the decomposition gives the
// partition's ranks. Its inner product sums every rank's local products (accumulated in double)
// over the parent communicator; ranks outside the partition hold nothing. Replicated copies are
// separate components (the sum convention of docs/adjoints.md). Cheap to copy: the description
// is shared.
class TensorSpace {
 public:
  TensorSpace() = default;
  // Balanced, tensor axis d split by grid axis d.
  TensorSpace(Shape global, Partition partition);
  TensorSpace(Partition partition, Decomposition decomposition);

  const Shape& global_shape() const;
  const Partition& partition() const;
  const Decomposition& decomposition() const;
  int rank() const { return global_shape().rank(); }

  // This rank's box (all extents 0 when the rank is outside the partition) and its offset.
  const Shape& local_shape() const;
  const std::vector<std::int64_t>& local_offset() const;
  // The box of any grid cell, and of any parent rank (all extents 0 outside the partition).
  Shape local_shape_at(const std::vector<int>& coords) const;
  Shape local_shape_of_rank(int parent_rank) const;

  // For every entry of this rank's box, in row-major order, its row-major index in the global
  // tensor: the key for anything that must not depend on the partitioning (seeded values, say).
  std::vector<std::int64_t> global_indices() const;

  // The same partition with another global extent on one unsplit axis (for instance a layer's
  // output features, or a new batch size).
  TensorSpace with_extent(int axis, std::int64_t extent) const;

  // Whether both hold the same entries on the same processes: the same global shape, the same
  // partition (Partition::same_as: the same parent ranks in the same grid, from congruent parents,
  // so that two partitions built separately over the same ranks and grid count as one) and the
  // same box on every grid cell (Decomposition's ==: an axis split over a grid axis of extent 1 is
  // the unsplit axis), however each space was derived. A check of metadata, the same on every rank.
  bool operator==(const TensorSpace& other) const;
  // Whether both are copies of the same space object (then equal, on the very same partition and
  // communicators): a check of one pointer, for caches keyed by a space.
  bool same_object(const TensorSpace& other) const noexcept { return impl_ == other.impl_; }
  // A hash of what operator== compares (global shape, grid, ranks, every block bound and the grid
  // axis splitting each split axis), which collective constructors compare across ranks: equal
  // spaces hash alike on every rank.
  std::uint64_t fingerprint() const;
  std::string str() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace distop
