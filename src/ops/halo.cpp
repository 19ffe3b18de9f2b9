#include "distop/ops/halo.hpp"

#include <algorithm>

#include "distop/core/error.hpp"
#include "distop/dist/decomposition.hpp"

namespace distop {

namespace {
constexpr const char* kOp = "halo_widths";
}  // namespace

std::vector<PartHalo> halo_widths(std::int64_t n, std::int64_t parts, const ConvWindow& w) {
  const std::int64_t m = window_output_extent(n, w);
  DISTOP_CHECK(parts >= 1 && n >= parts, kOp, "cannot split an input extent of ", n, " into ",
               parts, " non-empty parts");
  DISTOP_CHECK(m >= parts, kOp, "window ", w.str(), " over ", n, " inputs gives ", m,
               " outputs, fewer than the ", parts, " parts: a part would compute nothing");
  const auto in = balanced_bounds(n, parts);
  const auto out = balanced_bounds(m, parts);
  std::vector<PartHalo> h(static_cast<std::size_t>(parts));
  for (std::int64_t c = 0; c < parts; ++c) {
    auto& p = h[c];
    p.own_begin = in[c];
    p.own_end = in[c + 1];
    p.out_begin = out[c];
    p.out_end = out[c + 1];
    const std::int64_t first = p.out_begin * w.stride - w.padding;
    const std::int64_t last = (p.out_end - 1) * w.stride - w.padding + w.dilation * (w.kernel - 1);
    p.need_begin = std::max<std::int64_t>(first, 0);
    p.need_end = std::min<std::int64_t>(last + 1, n);
    if (p.need_begin >= p.need_end) {
      // Every output of the part lies in the padding: nothing is needed; keep the (empty) range
      // inside the own block so that both widths are surplus.
      p.need_begin = p.need_end = std::clamp(p.need_begin, p.own_begin, p.own_end);
    }
    p.left = p.own_begin - p.need_begin;
    p.right = p.need_end - p.own_end;
  }
  for (std::int64_t c = 0; c < parts; ++c) {
    const auto& p = h[c];
    // need_begin >= 0 and need_end <= n, so the first part's left and the last part's right
    // widths are never positive: these checks only meet parts with a neighbour on that side.
    DISTOP_CHECK(p.left <= 0 || p.need_begin >= h[c - 1].own_begin, kOp, "window ", w.str(),
                 " over ", n, " inputs in ", parts, " parts: part ", c, " needs inputs from ",
                 p.need_begin, ", a left halo of ", p.left,
                 " wider than its left neighbour's block [", h[c - 1].own_begin, ", ",
                 h[c - 1].own_end, ")");
    DISTOP_CHECK(p.right <= 0 || p.need_end <= h[c + 1].own_end, kOp, "window ", w.str(), " over ",
                 n, " inputs in ", parts, " parts: part ", c, " needs inputs up to ",
                 p.need_end - 1, ", a right halo of ", p.right,
                 " wider than its right neighbour's block [", h[c + 1].own_begin, ", ",
                 h[c + 1].own_end, ")");
  }
  return h;
}

HaloSpec halo_spec(const Shape& global, const Shape& grid, const std::vector<ConvWindow>& windows) {
  DISTOP_CHECK(global.rank() == grid.rank() && static_cast<int>(windows.size()) == global.rank(),
               "halo_spec", "a tensor of shape ", global.str(), " on a grid ", grid.str(), " with ",
               windows.size(), " windows: expected one grid axis and one window per tensor axis");
  HaloSpec spec(static_cast<std::size_t>(global.rank()));
  for (int a = 0; a < global.rank(); ++a) {
    std::vector<PartHalo> parts;
    try {
      parts = halo_widths(global[a], grid[a], windows[a]);
    } catch (const Error& e) {
      throw Error("halo_spec", detail::concat("tensor axis ", a, " of shape ", global.str(),
                                              " on grid ", grid.str(), ": ", e.detail()));
    }
    for (const auto& p : parts)
      spec[a].push_back({std::max<std::int64_t>(p.left, 0), std::max<std::int64_t>(p.right, 0)});
  }
  return spec;
}

}  // namespace distop
