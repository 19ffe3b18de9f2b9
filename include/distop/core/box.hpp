#pragma once
// Box: an axis-aligned box of a row-major tensor, the geometry every operator that moves part of a
// tensor is planned with (the intersections of ranks' blocks, ghost zones and their mirrors). The
// kernels that copy boxes are in kernels/box.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"

namespace distop {

// Per axis, the first index and the extent.
struct Box {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> extent;

  int rank() const noexcept { return static_cast<int>(extent.size()); }
  std::int64_t numel() const noexcept;
  bool empty() const noexcept { return numel() == 0; }
  // The intersection (empty extents where the boxes do not meet). The boxes have the same rank.
  Box intersect(const Box& other) const;
  // Whether the intersection holds an entry: !intersect(other).empty(), without building it.
  bool intersects(const Box& other) const noexcept;
  // The same box with `origin` subtracted from its offset (into another frame).
  Box relative_to(const std::vector<std::int64_t>& origin) const;
  std::string str() const;
  friend bool operator==(const Box&, const Box&) = default;
};

// The whole of a shape, as a box at the origin.
Box whole(const Shape& shape);

// Where the box's entries are one contiguous range of a row-major tensor of shape `shape` (every
// axis inside the outermost one on which the box holds more than one index is whole), the offset
// of its first entry; otherwise, and for an empty box, -1. Such boxes are sent from and received
// into a tensor in place, with no packing. The box lies inside the shape.
std::int64_t contiguous_offset(const Shape& shape, const Box& box);

}  // namespace distop
