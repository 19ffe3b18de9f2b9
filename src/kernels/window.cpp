#include "distop/kernels/window.hpp"

#include "distop/core/error.hpp"

namespace distop::kernels {

namespace {

std::string list(const std::vector<std::int64_t>& v) { return Shape(v).str(); }

}  // namespace

std::int64_t WindowGeometry::kernel_numel() const noexcept {
  std::int64_t n = 1;
  for (std::int64_t k : kernel) n *= k;
  return n;
}

std::string WindowGeometry::str() const {
  return detail::concat("{kernel ", list(kernel), ", stride ", list(stride), ", dilation ",
                        list(dilation), ", offset ", list(offset), ", in ", in.str(), ", out ",
                        out.str(), "}");
}

WindowGeometry WindowGeometry::ordinary(const Shape& in, const std::vector<ConvWindow>& windows) {
  DISTOP_CHECK(in.rank() >= 1 && in.rank() <= 3 && static_cast<int>(windows.size()) == in.rank(),
               "WindowGeometry::ordinary", "expected 1 to 3 spatial extents and one window each, ",
               "found extents ", in.str(), " and ", windows.size(), " windows");
  WindowGeometry g;
  std::vector<std::int64_t> out;
  for (int a = 0; a < in.rank(); ++a) {
    const ConvWindow& w = windows[static_cast<std::size_t>(a)];
    g.kernel.push_back(w.kernel);
    g.stride.push_back(w.stride);
    g.dilation.push_back(w.dilation);
    g.offset.push_back(w.padding);
    out.push_back(window_output_extent(in[a], w));
  }
  g.in = in;
  g.out = Shape(std::move(out));
  return g;
}

void WindowGeometry::validate(const char* where) const {
  const int d = dims();
  const auto n = static_cast<std::size_t>(d);
  DISTOP_CHECK(d >= 1 && d <= 3 && stride.size() == n && dilation.size() == n &&
                   offset.size() == n && in.rank() == d && out.rank() == d,
               where, "a window geometry needs 1 to 3 axes and every field with one entry each, ",
               "found ", str());
  for (int a = 0; a < d; ++a) {
    const auto i = static_cast<std::size_t>(a);
    DISTOP_CHECK(kernel[i] >= 1 && stride[i] >= 1 && dilation[i] >= 1, where,
                 "kernel, stride and dilation must be at least 1, found ", str());
    DISTOP_CHECK(in[a] >= 1 && out[a] >= 1, where, "input and output extents must be at least 1, ",
                 "found ", str());
  }
}

}  // namespace distop::kernels
