#pragma once
// Shape: the extents of a dense row-major tensor, of any rank.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace distop {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> extents) : extents_(extents) {}
  explicit Shape(std::vector<std::int64_t> extents) : extents_(std::move(extents)) {}

  int rank() const noexcept { return static_cast<int>(extents_.size()); }
  std::int64_t operator[](int axis) const { return extents_.at(static_cast<std::size_t>(axis)); }
  std::int64_t& operator[](int axis) { return extents_.at(static_cast<std::size_t>(axis)); }
  // The number of elements: the product of the extents (1 for rank 0).
  std::int64_t numel() const noexcept;
  // Row-major strides, in elements.
  std::vector<std::int64_t> strides() const;
  const std::vector<std::int64_t>& extents() const noexcept { return extents_; }
  auto begin() const noexcept { return extents_.begin(); }
  auto end() const noexcept { return extents_.end(); }

  // "[2, 3, 4]"
  std::string str() const;

  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::int64_t> extents_;
};

}  // namespace distop
