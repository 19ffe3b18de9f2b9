#pragma once
// Internal: a box of a tensor seen as runs of contiguous entries (kernels/box.hpp:
// detail::BoxRuns), the geometry that box.cpp (the portable box kernels and BoxPlan) and
// host/box.cpp (their host fast paths) share.

#include <cstdint>

#include "distop/core/error.hpp"
#include "distop/kernels/box.hpp"

namespace distop::kernels::box_detail {

using Runs = detail::BoxRuns;

// An Error unless box lies inside a tensor of this shape.
inline void check_box(const Shape& shape, const Box& box, const char* op) {
  DISTOP_CHECK(box.rank() == shape.rank(), op, "box ", box.str(), " of rank ", box.rank(),
               " in a tensor of rank ", shape.rank());
  for (int a = 0; a < shape.rank(); ++a)
    DISTOP_CHECK(
        box.offset[a] >= 0 && box.extent[a] >= 0 && box.offset[a] + box.extent[a] <= shape[a], op,
        "box ", box.str(), " does not lie inside a tensor of shape ", shape.str());
}

// The number of leading axes iterated over: the trailing axes the box spans whole merge with the
// first one (from the inside) it does not span whole into one run.
inline int iterated_axes(const Shape& shape, const Box& box) {
  int inner = shape.rank();
  while (inner > 0) {
    const int a = inner - 1;
    --inner;
    if (box.extent[a] != shape[a]) break;
  }
  return inner;
}

// The runs with axes [0, inner) iterated over and the rest merged (inner at most
// iterated_axes(shape, box), so that the merged axes are contiguous).
inline Runs runs_with(const Shape& shape, const Box& box, int inner) {
  const auto strides = shape.strides();
  Runs r;
  r.base = 0;
  for (int a = 0; a < shape.rank(); ++a) r.base += box.offset[a] * strides[a];
  if (box.numel() == 0) return r;
  r.run = 1;
  for (int a = inner; a < shape.rank(); ++a) r.run *= box.extent[a];
  r.rows = 1;
  for (int a = 0; a < inner; ++a) {
    r.row_extent.push_back(box.extent[a]);
    r.row_stride.push_back(strides[a]);
    r.rows *= box.extent[a];
  }
  return r;
}

// The runs of a checked box, as few as its shape allows.
inline Runs runs_of(const Shape& shape, const Box& box, const char* op) {
  check_box(shape, box, op);
  return runs_with(shape, box, iterated_axes(shape, box));
}

// The runs of a packed buffer laid out like r: run i at i * r.run.
inline Runs packed_like(const Runs& r) {
  Runs p = r;
  p.base = 0;
  std::int64_t stride = r.run;
  for (std::size_t a = r.row_extent.size(); a-- > 0;) {
    p.row_stride[a] = stride;
    stride *= r.row_extent[a];
  }
  return p;
}

// The tensor offset of run i.
inline std::int64_t row_start(const Runs& r, std::int64_t i) {
  std::int64_t off = r.base;
  for (int a = static_cast<int>(r.row_extent.size()) - 1; a >= 0; --a) {
    off += (i % r.row_extent[a]) * r.row_stride[a];
    i /= r.row_extent[a];
  }
  return off;
}

}  // namespace distop::kernels::box_detail
