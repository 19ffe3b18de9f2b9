#include "distop/core/box.hpp"

#include <algorithm>

namespace distop {

namespace {

// The overlap of [lo_a, lo_a + n_a) and [lo_b, lo_b + n_b): its first index and its length (0
// where they do not meet).
struct Span1 {
  std::int64_t lo;
  std::int64_t n;
};
Span1 overlap_1d(std::int64_t lo_a, std::int64_t n_a, std::int64_t lo_b, std::int64_t n_b) {
  const auto lo = std::max(lo_a, lo_b);
  const auto hi = std::min(lo_a + n_a, lo_b + n_b);
  return {lo, std::max<std::int64_t>(0, hi - lo)};
}

}  // namespace

std::int64_t Box::numel() const noexcept {
  std::int64_t n = 1;
  for (auto e : extent) n *= e;
  return n;
}

Box Box::intersect(const Box& other) const {
  Box b{offset, extent};
  for (int a = 0; a < rank(); ++a) {
    const auto s = overlap_1d(offset[a], extent[a], other.offset[a], other.extent[a]);
    b.offset[a] = s.lo;
    b.extent[a] = s.n;
  }
  return b;
}

bool Box::intersects(const Box& other) const noexcept {
  for (int a = 0; a < rank(); ++a)
    if (overlap_1d(offset[a], extent[a], other.offset[a], other.extent[a]).n == 0) return false;
  return true;
}

Box Box::relative_to(const std::vector<std::int64_t>& origin) const {
  Box b{offset, extent};
  for (int a = 0; a < rank(); ++a) b.offset[a] -= origin[a];
  return b;
}

std::string Box::str() const {
  std::string s = "[";
  for (int a = 0; a < rank(); ++a) {
    if (a) s += ", ";
    s += std::to_string(offset[a]) + ":" + std::to_string(offset[a] + extent[a]);
  }
  return s + "]";
}

Box whole(const Shape& shape) {
  return Box{std::vector<std::int64_t>(static_cast<std::size_t>(shape.rank()), 0), shape.extents()};
}

std::int64_t contiguous_offset(const Shape& shape, const Box& box) {
  if (box.empty()) return -1;
  const int rank = box.rank();
  int k = 0;
  while (k < rank && box.extent[k] == 1) ++k;
  for (int b = k + 1; b < rank; ++b)
    if (box.extent[b] != shape[b]) return -1;
  std::int64_t off = 0;
  std::int64_t stride = 1;
  for (int b = rank - 1; b >= 0; --b) {
    off += box.offset[b] * stride;
    stride *= shape[b];
  }
  return off;
}

}  // namespace distop
