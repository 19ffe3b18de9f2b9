#include "distop/core/shape.hpp"

namespace distop {

std::int64_t Shape::numel() const noexcept {
  std::int64_t n = 1;
  for (auto e : extents_) n *= e;
  return n;
}

std::vector<std::int64_t> Shape::strides() const {
  std::vector<std::int64_t> s(extents_.size(), 1);
  for (int d = rank() - 2; d >= 0; --d) s[d] = s[d + 1] * extents_[d + 1];
  return s;
}

std::string Shape::str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < extents_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(extents_[i]);
  }
  return s + "]";
}

}  // namespace distop
