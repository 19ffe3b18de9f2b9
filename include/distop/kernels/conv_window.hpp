#pragma once
// ConvWindow: the window of a convolution or pooling along one axis, and the output extent it gives.

#include <cstdint>
#include <string>

namespace distop {

// A convolution or pooling window along one axis. Output o reads the input indices
// o * stride - padding + j * dilation for j = 0 .. kernel - 1; indices outside [0, n) are the
// layer's global padding, which exists only at the domain boundary.
struct ConvWindow {
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::string str() const;
};

// The output extent m = floor((n + 2 p - d (k - 1) - 1) / s) + 1 of a window over n inputs.
// Error unless the window's parameters are valid (k, s, d >= 1, p >= 0) and m >= 1.
std::int64_t window_output_extent(std::int64_t n, const ConvWindow& w);

}  // namespace distop
