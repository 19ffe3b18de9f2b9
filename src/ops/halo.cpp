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

namespace {

constexpr const char* kTransposedOp = "transposed_halo_widths";

// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

}  // namespace

std::int64_t transposed_output_extent(std::int64_t n, const ConvWindow& w,
                                      std::int64_t output_padding) {
  DISTOP_CHECK(w.kernel >= 1 && w.stride >= 1 && w.dilation >= 1 && w.padding >= 0, kTransposedOp,
               "invalid window ", w.str(),
               ": kernel, stride and dilation must be at least 1 and padding at least 0");
  DISTOP_CHECK(n >= 1, kTransposedOp, "an input extent of ", n, " has no entries");
  DISTOP_CHECK(output_padding >= 0 && (output_padding < w.stride || output_padding < w.dilation),
               kTransposedOp, "output padding ", output_padding, " with the window ", w.str(),
               ": it must be at least 0 and smaller than either the stride or the dilation");
  const std::int64_t m =
      (n - 1) * w.stride - 2 * w.padding + w.dilation * (w.kernel - 1) + output_padding + 1;
  DISTOP_CHECK(m >= 1, kTransposedOp, "window ", w.str(), " with output padding ", output_padding,
               " over ", n, " inputs gives an output extent of ", m,
               ": the padding removes every output");
  return m;
}

std::vector<PartHalo> transposed_halo_widths(std::int64_t n, std::int64_t parts,
                                             const ConvWindow& w, std::int64_t output_padding) {
  const std::int64_t m = transposed_output_extent(n, w, output_padding);
  const std::string what = detail::concat("transposed window ", w.str(), " (output padding ",
                                          output_padding, ") over ", n, " inputs");
  DISTOP_CHECK(parts >= 1 && n >= parts, kTransposedOp, "cannot split an input extent of ", n,
               " into ", parts, " non-empty parts");
  DISTOP_CHECK(m >= parts, kTransposedOp, what, " gives ", m, " outputs, fewer than the ", parts,
               " parts: a part would compute nothing");
  const auto in = balanced_bounds(n, parts);
  const auto out = balanced_bounds(m, parts);
  std::vector<PartHalo> h(static_cast<std::size_t>(parts));
  for (std::int64_t c = 0; c < parts; ++c) {
    auto& p = h[c];
    p.own_begin = in[c];
    p.own_end = in[c + 1];
    p.out_begin = out[c];
    p.out_end = out[c + 1];
    // Input i reaches the outputs i s - p + j d: the first input whose last tap (j = k - 1) lands
    // at or after out_begin, the last whose first tap (j = 0) lands before out_end.
    const std::int64_t first =
        ceil_div(p.out_begin + w.padding - w.dilation * (w.kernel - 1), w.stride);
    const std::int64_t last = floor_div(p.out_end - 1 + w.padding, w.stride);
    p.need_begin = std::max<std::int64_t>(first, 0);
    p.need_end = std::min<std::int64_t>(last + 1, n);
    if (p.need_begin >= p.need_end)
      p.need_begin = p.need_end = std::clamp(p.need_begin, p.own_begin, p.own_end);
    p.left = p.own_begin - p.need_begin;
    p.right = p.need_end - p.own_end;
  }
  for (std::int64_t c = 0; c < parts; ++c) {
    const auto& p = h[c];
    DISTOP_CHECK(p.left <= 0 || p.need_begin >= h[c - 1].own_begin, kTransposedOp, what, " in ",
                 parts, " parts: part ", c, " needs inputs from ", p.need_begin,
                 ", a left halo of ", p.left, " wider than its left neighbour's block [",
                 h[c - 1].own_begin, ", ", h[c - 1].own_end, ")");
    DISTOP_CHECK(p.right <= 0 || p.need_end <= h[c + 1].own_end, kTransposedOp, what, " in ", parts,
                 " parts: part ", c, " needs inputs up to ", p.need_end - 1, ", a right halo of ",
                 p.right, " wider than its right neighbour's block [", h[c + 1].own_begin, ", ",
                 h[c + 1].own_end, ")");
  }
  return h;
}

HaloSpec transposed_halo_spec(const Shape& global, const Shape& grid,
                              const std::vector<ConvWindow>& windows,
                              const std::vector<std::int64_t>& output_padding) {
  DISTOP_CHECK(global.rank() == grid.rank() && static_cast<int>(windows.size()) == global.rank() &&
                   static_cast<int>(output_padding.size()) == global.rank(),
               "transposed_halo_spec", "a tensor of shape ", global.str(), " on a grid ",
               grid.str(), " with ", windows.size(), " windows and ", output_padding.size(),
               " output paddings: expected one grid axis, window and output padding per tensor "
               "axis");
  HaloSpec spec(static_cast<std::size_t>(global.rank()));
  for (int a = 0; a < global.rank(); ++a) {
    const auto u = static_cast<std::size_t>(a);
    std::vector<PartHalo> parts;
    try {
      parts = transposed_halo_widths(global[a], grid[a], windows[u], output_padding[u]);
    } catch (const Error& e) {
      throw Error("transposed_halo_spec",
                  detail::concat("tensor axis ", a, " of shape ", global.str(), " on grid ",
                                 grid.str(), ": ", e.detail()));
    }
    for (const auto& p : parts)
      spec[u].push_back({std::max<std::int64_t>(p.left, 0), std::max<std::int64_t>(p.right, 0)});
  }
  return spec;
}

}  // namespace distop
