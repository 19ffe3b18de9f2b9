#pragma once
// WindowGeometry: where each output of a local convolution or pooling reads its input.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/kernels/conv_window.hpp"

namespace distop::kernels {

// The sliding window of a convolution or pooling over the d spatial axes (d = 1, 2 or 3) of a local
// tensor [N, C, s_1, ..., s_d]. Along spatial axis a, output o reads tap j (j = 0 .. kernel[a] - 1)
// at input index
//     o * stride[a] - offset[a] + j * dilation[a];
// indices outside [0, in_a) are padding: zero for a convolution and an average pooling, ignored
// (-infinity) for a max pooling. An ordinary layer has offset = padding and
// out = window_output_extent(in, window). A distributed layer runs the same kernels on a rank's
// halo-padded local array: its offset places the rank's first output over the right input entry
// (negative when surplus input is trimmed) and out is the rank's share of the outputs, so padding
// is only ever read at the global domain boundary.
struct WindowGeometry {
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> stride;
  std::vector<std::int64_t> dilation;
  std::vector<std::int64_t> offset;
  Shape in;   // input spatial extents
  Shape out;  // output spatial extents

  int dims() const noexcept { return static_cast<int>(kernel.size()); }
  std::int64_t kernel_numel() const noexcept;
  std::string str() const;

  // An ordinary window over a whole input of spatial extents `in`: offset = padding and
  // out = window_output_extent. Error unless in and windows have 1 to 3 entries each and the
  // windows are valid (window_output_extent).
  static WindowGeometry ordinary(const Shape& in, const std::vector<ConvWindow>& windows);
  // Checks the fields are consistent (1-3 axes, kernel/stride/dilation >= 1, extents >= 1); an
  // Error naming `where` otherwise.
  void validate(const char* where) const;
};

}  // namespace distop::kernels
