#include "distop/kernels/window.hpp"

#include "distop/core/error.hpp"

namespace distop {

std::string ConvWindow::str() const {
  return detail::concat("{kernel ", kernel, ", stride ", stride, ", padding ", padding,
                        ", dilation ", dilation, "}");
}

std::int64_t window_output_extent(std::int64_t n, const ConvWindow& w) {
  constexpr const char* kOp = "halo_widths";
  DISTOP_CHECK(w.kernel >= 1 && w.stride >= 1 && w.dilation >= 1 && w.padding >= 0, kOp,
               "invalid window ", w.str(),
               ": kernel, stride and dilation must be at least 1 and padding at least 0");
  DISTOP_CHECK(n >= 1, kOp, "an input extent of ", n, " has no entries");
  const std::int64_t span = n + 2 * w.padding - w.dilation * (w.kernel - 1) - 1;
  DISTOP_CHECK(span >= 0, kOp, "window ", w.str(), " is larger than the padded input of extent ", n,
               " + 2 * ", w.padding);
  return span / w.stride + 1;
}

}  // namespace distop

namespace distop::kernels {

namespace {

std::string list(const std::vector<std::int64_t>& v) { return Shape(v).str(); }

}  // namespace

std::int64_t WindowGeometry::kernel_numel() const noexcept {
  std::int64_t n = 1;
  for (auto k : kernel) n *= k;
  return n;
}

std::string WindowGeometry::str() const {
  return detail::concat("{kernel ", list(kernel), ", stride ", list(stride), ", dilation ",
                        list(dilation), ", offset ", list(offset), ", in ", in.str(), ", out ",
                        out.str(), "}");
}

WindowGeometry WindowGeometry::ordinary(const Shape& in, const std::vector<ConvWindow>& windows) {
  const auto d = static_cast<int>(windows.size());
  DISTOP_CHECK(d >= 1 && d <= 3 && in.rank() == d, "WindowGeometry::ordinary",
               "expected 1 to 3 spatial axes with one window each, found input extents ", in.str(),
               " and ", d, " window(s)");
  WindowGeometry g;
  g.in = in;
  std::vector<std::int64_t> out;
  for (int a = 0; a < d; ++a) {
    const ConvWindow& w = windows[static_cast<std::size_t>(a)];
    out.push_back(window_output_extent(in[a], w));  // validates the window
    g.kernel.push_back(w.kernel);
    g.stride.push_back(w.stride);
    g.dilation.push_back(w.dilation);
    g.offset.push_back(w.padding);
  }
  g.out = Shape(std::move(out));
  return g;
}

void WindowGeometry::validate(const char* where) const {
  const int d = dims();
  DISTOP_CHECK(d >= 1 && d <= 3, where, "a window geometry has 1 to 3 spatial axes, found ", d,
               " in ", str());
  DISTOP_CHECK(static_cast<int>(stride.size()) == d && static_cast<int>(dilation.size()) == d &&
                   static_cast<int>(offset.size()) == d && in.rank() == d && out.rank() == d,
               where, "the fields of a window geometry must all have ", d,
               " entries (one per spatial axis), found ", str());
  for (int a = 0; a < d; ++a) {
    const auto u = static_cast<std::size_t>(a);
    DISTOP_CHECK(kernel[u] >= 1 && stride[u] >= 1 && dilation[u] >= 1, where,
                 "kernel, stride and dilation must be at least 1, found ", str());
    DISTOP_CHECK(in[a] >= 1 && out[a] >= 1, where,
                 "input and output extents must be at least 1, found ", str());
  }
}

}  // namespace distop::kernels
