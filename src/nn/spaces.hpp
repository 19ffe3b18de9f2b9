#pragma once
// Internal to the nn layer: the spaces of the local operations' outputs, derived from their
// inputs' spaces (metadata only, so that every rank derives the same space and raises the same
// Error), and the checks of their contracts.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop::nn::detail {

// The block extents of every axis of a decomposition (for Decomposition::blocks).
inline std::vector<std::vector<std::int64_t>> block_extents(const Decomposition& d) {
  std::vector<std::vector<std::int64_t>> out;
  for (int a = 0; a < d.global_shape().rank(); ++a) {
    const auto& b = d.bounds(a);
    std::vector<std::int64_t> e;
    for (std::size_t i = 0; i + 1 < b.size(); ++i) e.push_back(b[i + 1] - b[i]);
    out.push_back(std::move(e));
  }
  return out;
}

// `axis` counted from the front, torch's way: -1 is the last axis of a tensor of rank `rank`.
inline int normalize_axis(int axis, int rank, const char* op) {
  DISTOP_CHECK(axis >= -rank && axis < rank, op, "axis ", axis,
               " is out of range for a tensor of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// Whether axis a of space s is split over the grid.
inline bool split(const TensorSpace& s, int a) { return s.decomposition().parts(a) > 1; }

// Whether axis a of s and axis b of t (spaces on the same partition) give every rank the same
// block: the same bounds, and, where split, by the same grid axis.
inline bool same_blocks(const TensorSpace& s, int a, const TensorSpace& t, int b) {
  const Decomposition& ds = s.decomposition();
  const Decomposition& dt = t.decomposition();
  return ds.bounds(a) == dt.bounds(b) && (ds.parts(a) == 1 || ds.axis_map()[a] == dt.axis_map()[b]);
}

// A [1] scalar replicated over the partition (distop's scalar: one component per rank).
inline TensorSpace scalar_space(const Partition& p) {
  return TensorSpace(p, Decomposition::balanced(Shape{1}, p.shape(), {-1}));
}

// The rows of a box [..., n] for a row kernel: [box.numel() / n, n] ([0, n] when n is 0).
inline Shape row_shape(const Shape& box) {
  const std::int64_t n = box[box.rank() - 1];
  return Shape{n == 0 ? 0 : box.numel() / n, n};
}

// x's space with `axes` (distinct, increasing, unsplit) removed or, with keepdim, of extent 1; the
// scalar space when every axis goes.
inline TensorSpace reduced_space(const TensorSpace& xs, const std::vector<int>& axes,
                                 bool keepdim) {
  const Decomposition& d = xs.decomposition();
  auto extents = block_extents(d);
  std::vector<std::int64_t> global;
  std::vector<std::vector<std::int64_t>> kept_extents;
  std::vector<int> map;
  std::size_t next = 0;
  for (int a = 0; a < xs.rank(); ++a) {
    const bool reduced = next < axes.size() && axes[next] == a;
    if (reduced) ++next;
    if (reduced && !keepdim) continue;
    global.push_back(reduced ? 1 : xs.global_shape()[a]);
    kept_extents.push_back(reduced ? std::vector<std::int64_t>{1} : extents[a]);
    map.push_back(d.axis_map()[a]);
  }
  if (global.empty()) return scalar_space(xs.partition());
  return TensorSpace(xs.partition(),
                     Decomposition::blocks(Shape(global), d.grid(), kept_extents, map));
}

}  // namespace distop::nn::detail
