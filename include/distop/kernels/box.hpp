#pragma once
// Boxes of local tensors: packing them into contiguous buffers and back, the kernels behind every
// operator that moves part of a tensor (repartition, gather, scatter, halo exchange).

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/tensor.hpp"

namespace distop {

// An axis-aligned box of a row-major tensor: per axis, the first index and the extent.
struct Box {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> extent;

  int rank() const noexcept { return static_cast<int>(extent.size()); }
  std::int64_t numel() const noexcept;
  bool empty() const noexcept { return numel() == 0; }
  // The intersection (empty extents where the boxes do not meet).
  Box intersect(const Box& other) const;
  // The same box with `origin` subtracted from its offset (into another frame).
  Box relative_to(const std::vector<std::int64_t>& origin) const;
  std::string str() const;
  friend bool operator==(const Box&, const Box&) = default;
};

// The whole of a shape, as a box at the origin.
Box whole(const Shape& shape);

namespace kernels {

// out[0 .. box.numel()) = src[box], row-major over the box. The box must lie inside src.
template <class T>
void pack(const Tensor<T>& src, const Box& box, T* out);
// dst[box] = in (or += in when accumulate).
template <class T>
void unpack(const T* in, const Box& box, Tensor<T>& dst, bool accumulate = false);
// dst[dst_box] = src[src_box] (or +=); the boxes have the same extents.
template <class T>
void copy_box(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
              bool accumulate = false);
// t[box] = value
template <class T>
void fill_box(Tensor<T>& t, const Box& box, T value);

}  // namespace kernels
}  // namespace distop
