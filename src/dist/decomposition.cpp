#include "distop/dist/decomposition.hpp"

#include <algorithm>

#include "distop/core/error.hpp"

namespace distop {

namespace {

constexpr const char* kOp = "Decomposition";

std::vector<int> resolve_axis_map(const Shape& global, const Shape& grid, std::vector<int> map) {
  if (map.empty()) {
    DISTOP_CHECK(global.rank() == grid.rank(), kOp, "a tensor of rank ", global.rank(), " (shape ",
                 global.str(), ") on a grid of rank ", grid.rank(), " (", grid.str(),
                 ") needs an explicit axis map");
    map.resize(static_cast<std::size_t>(global.rank()));
    for (int d = 0; d < global.rank(); ++d) map[d] = d;
  }
  DISTOP_CHECK(static_cast<int>(map.size()) == global.rank(), kOp, "the axis map has ", map.size(),
               " entries for a tensor of rank ", global.rank());
  std::vector<int> used;
  for (int g : map) {
    if (g < 0) continue;
    DISTOP_CHECK(g < grid.rank(), kOp, "axis map names grid axis ", g, " of grid ", grid.str());
    DISTOP_CHECK(std::find(used.begin(), used.end(), g) == used.end(), kOp, "grid axis ", g,
                 " splits two tensor axes");
    used.push_back(g);
  }
  return map;
}

}  // namespace

std::vector<std::int64_t> balanced_bounds(std::int64_t n, std::int64_t parts) {
  DISTOP_CHECK(parts >= 1, kOp, "cannot split into ", parts, " parts");
  DISTOP_CHECK(n >= parts, kOp, "cannot split an extent of ", n, " into ", parts,
               " non-empty parts");
  std::vector<std::int64_t> b(static_cast<std::size_t>(parts + 1), 0);
  for (std::int64_t p = 0; p < parts; ++p) b[p + 1] = b[p] + n / parts + (p < n % parts ? 1 : 0);
  return b;
}

Decomposition Decomposition::balanced(const Shape& global, const Shape& grid,
                                      std::vector<int> axis_map) {
  Decomposition d;
  d.global_ = global;
  d.grid_ = grid;
  d.axis_map_ = resolve_axis_map(global, grid, std::move(axis_map));
  for (int a = 0; a < global.rank(); ++a) {
    const int g = d.axis_map_[a];
    const std::int64_t parts = g < 0 ? 1 : grid[g];
    if (global[a] == 0 && parts == 1) {
      d.bounds_.push_back({0, 0});
      continue;
    }
    try {
      d.bounds_.push_back(balanced_bounds(global[a], parts));
    } catch (const Error&) {
      throw Error(kOp, detail::concat("tensor axis ", a, " of extent ", global[a], " (shape ",
                                      global.str(), ") cannot be split over ", parts,
                                      " parts of grid ", grid.str(), ": a part would be empty"));
    }
  }
  return d;
}

Decomposition Decomposition::blocks(const Shape& global, const Shape& grid,
                                    std::vector<std::vector<std::int64_t>> extents,
                                    std::vector<int> axis_map) {
  Decomposition d;
  d.global_ = global;
  d.grid_ = grid;
  d.axis_map_ = resolve_axis_map(global, grid, std::move(axis_map));
  DISTOP_CHECK(static_cast<int>(extents.size()) == global.rank(), kOp, "expected block extents for ",
               global.rank(), " axes, found ", extents.size());
  for (int a = 0; a < global.rank(); ++a) {
    const int g = d.axis_map_[a];
    const std::int64_t parts = g < 0 ? 1 : grid[g];
    const auto& e = extents[a];
    DISTOP_CHECK(static_cast<std::int64_t>(e.size()) == parts, kOp, "tensor axis ", a, " is split in ",
                 parts, " parts but ", e.size(), " extents were given");
    std::vector<std::int64_t> b{0};
    for (auto x : e) {
      DISTOP_CHECK(x >= 1 || (parts == 1 && x == 0), kOp, "block extents must be at least 1, found ",
                   x, " on tensor axis ", a);
      b.push_back(b.back() + x);
    }
    DISTOP_CHECK(b.back() == global[a], kOp, "block extents on tensor axis ", a, " add up to ",
                 b.back(), ", but the global extent is ", global[a]);
    d.bounds_.push_back(std::move(b));
  }
  return d;
}

bool operator==(const Decomposition& a, const Decomposition& b) {
  if (a.global_ != b.global_ || a.grid_ != b.grid_ || a.bounds_ != b.bounds_) return false;
  for (int d = 0; d < a.global_.rank(); ++d)
    if (a.split_by(d) != b.split_by(d)) return false;
  return true;
}

bool Decomposition::replicates(int grid_axis) const {
  return std::find(axis_map_.begin(), axis_map_.end(), grid_axis) == axis_map_.end();
}

bool Decomposition::balanced() const {
  for (int a = 0; a < global_.rank(); ++a) {
    const int g = axis_map_[a];
    if (bounds_[a] != balanced_bounds(std::max<std::int64_t>(global_[a], 1), g < 0 ? 1 : grid_[g]) &&
        global_[a] != 0)
      return false;
  }
  return true;
}

Shape Decomposition::local_shape(const std::vector<int>& coords) const {
  DISTOP_CHECK(static_cast<int>(coords.size()) == grid_.rank(), kOp, "expected ", grid_.rank(),
               " grid coordinates, found ", coords.size());
  std::vector<std::int64_t> e(static_cast<std::size_t>(global_.rank()));
  for (int a = 0; a < global_.rank(); ++a) {
    const int g = axis_map_[a];
    const int c = g < 0 ? 0 : coords[g];
    e[a] = bounds_[a][c + 1] - bounds_[a][c];
  }
  return Shape(std::move(e));
}

std::vector<std::int64_t> Decomposition::local_offset(const std::vector<int>& coords) const {
  std::vector<std::int64_t> o(static_cast<std::size_t>(global_.rank()));
  for (int a = 0; a < global_.rank(); ++a) {
    const int g = axis_map_[a];
    o[a] = bounds_[a][g < 0 ? 0 : coords.at(g)];
  }
  return o;
}

std::string Decomposition::str() const {
  std::string s = "{";
  for (int a = 0; a < global_.rank(); ++a) {
    if (a) s += ", ";
    s += std::to_string(global_[a]);
    if (axis_map_[a] >= 0) s += "/grid" + std::to_string(axis_map_[a]);
  }
  return s + "}";
}

}  // namespace distop
