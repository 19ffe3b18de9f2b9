#pragma once
// Decomposition: how a global tensor's index space is split into boxes over a partition's grid.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"

namespace distop {

// Block decomposition of a global shape over a grid. Each tensor axis d is either split into
// contiguous blocks by one grid axis, axis_map()[d], or held whole (axis_map()[d] == -1). A grid
// axis that splits no tensor axis replicates: every rank along it holds the same box, and under
// distop's sum convention each copy is its own component of the space.
//
// By default tensor axis d is split by grid axis d (the tensor and the grid have the same rank),
// balanced: an extent n over P parts gives n / P to each part and one more to the first n % P.
// Unbalanced splits are given as explicit extents per part. Every part must be non-empty.
class Decomposition {
 public:
  Decomposition() = default;
  // Balanced; axis_map empty means the identity (which needs global.rank() == grid.rank()).
  static Decomposition balanced(const Shape& global, const Shape& grid,
                                std::vector<int> axis_map = {});
  // Unbalanced: extents[d] lists the block extents along tensor axis d, one per grid cell along
  // axis_map[d] (a single entry, the whole extent, for an axis that is not split).
  static Decomposition blocks(const Shape& global, const Shape& grid,
                              std::vector<std::vector<std::int64_t>> extents,
                              std::vector<int> axis_map = {});

  const Shape& global_shape() const noexcept { return global_; }
  const Shape& grid() const noexcept { return grid_; }
  const std::vector<int>& axis_map() const noexcept { return axis_map_; }
  // Block offsets along tensor axis d: parts + 1 entries, from 0 to the global extent.
  const std::vector<std::int64_t>& bounds(int axis) const { return bounds_.at(axis); }
  // The number of blocks along tensor axis d (1 when it is held whole or its grid axis has extent
  // 1).
  std::int64_t parts(int axis) const { return static_cast<std::int64_t>(bounds(axis).size()) - 1; }
  // The grid axis that splits tensor axis d into more than one block, or -1 where every grid cell
  // holds it whole (unmapped, or mapped to a grid axis of extent 1: the same boxes either way).
  int split_by(int axis) const { return parts(axis) > 1 ? axis_map_.at(axis) : -1; }
  // Whether grid axis g splits no tensor axis.
  bool replicates(int grid_axis) const;
  bool balanced() const;

  // The box held by grid coordinates `coords`.
  Shape local_shape(const std::vector<int>& coords) const;
  std::vector<std::int64_t> local_offset(const std::vector<int>& coords) const;

  std::string str() const;
  // Whether both give every grid cell the same box: the same global shape, grid and block bounds,
  // and each axis split by the same grid axis where it is split at all. An axis mapped to a grid
  // axis of extent 1 equals the unmapped axis, however the two were derived.
  friend bool operator==(const Decomposition& a, const Decomposition& b);

 private:
  Shape global_;
  Shape grid_;
  std::vector<int> axis_map_;
  std::vector<std::vector<std::int64_t>> bounds_;
};

// n / P each, the first n % P one more: the P + 1 block offsets.
std::vector<std::int64_t> balanced_bounds(std::int64_t n, std::int64_t parts);

}  // namespace distop
