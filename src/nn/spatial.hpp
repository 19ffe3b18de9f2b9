#pragma once
// What the distributed window layers (convolution, pooling) share: the local window geometry of a
// rank's halo-padded block.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/kernels/window.hpp"
#include "distop/ops/halo.hpp"

namespace distop::nn::detail {

// The windows HaloExchange needs for a [N, C, s..] tensor: none (width 0) on the batch and
// channel axes, the layer's windows on the spatial axes.
inline std::vector<ConvWindow> halo_windows(const std::vector<ConvWindow>& spatial) {
  std::vector<ConvWindow> w(2);
  w.insert(w.end(), spatial.begin(), spatial.end());
  return w;
}

// Whether a grid [., ., S..] splits any spatial axis.
inline bool splits_spatial(const Shape& grid) {
  for (int a = 2; a < grid.rank(); ++a)
    if (grid[a] > 1) return true;
  return false;
}

// Whether a [N, C, s..] tensor of shape `global` split balanced over `grid` needs a halo exchange
// (and its padding) before a window layer with these spatial windows: some rank reads input that
// a neighbour owns. Not when the grid splits no spatial axis, nor when every part's windows stay
// inside its own block (LeNet's 2 x 2 pooling over even blocks): then the exchange would move
// nothing and the padding would be a copy. The same answer on every rank (halo_spec is a pure
// function of the arguments, with the same errors everywhere).
inline bool needs_halo(const Shape& global, const Shape& grid,
                       const std::vector<ConvWindow>& spatial) {
  if (!splits_spatial(grid)) return false;
  for (const auto& axis : halo_spec(global, grid, halo_windows(spatial)))
    for (const GhostWidths& w : axis)
      if (w.left > 0 || w.right > 0) return true;
  return false;
}

// The geometry of the local kernel on the rank at spatial grid coordinates `coords` (one per
// spatial axis), whose local input is its block of a [.., .., n..] tensor split balanced into
// `parts` along each spatial axis, extended by the ghost zones HaloExchange fills (halo_spec:
// positive widths only) and of spatial extents `local_in`. Its outputs are its balanced share of
// the window's outputs; the offset places the first of them over the input entry it reads first
// (the first entry of the local array is global index own_begin - left ghost width). Reads outside
// the local array happen only at the domain boundary, where they are the layer's padding.
inline kernels::WindowGeometry local_geometry(const Shape& global, const Shape& parts,
                                              const std::vector<int>& coords,
                                              const std::vector<ConvWindow>& windows,
                                              const Shape& local_in) {
  kernels::WindowGeometry g;
  std::vector<std::int64_t> in, out;
  for (std::size_t a = 0; a < windows.size(); ++a) {
    const auto& w = windows[a];
    const int ax = static_cast<int>(a);
    const auto halos = halo_widths(global[ax], parts[ax], w);
    const PartHalo& ph = halos.at(static_cast<std::size_t>(coords[a]));
    const std::int64_t start = ph.own_begin - std::max<std::int64_t>(ph.left, 0);
    g.kernel.push_back(w.kernel);
    g.stride.push_back(w.stride);
    g.dilation.push_back(w.dilation);
    g.offset.push_back(start + w.padding - ph.out_begin * w.stride);
    in.push_back(local_in[ax]);
    out.push_back(ph.out_end - ph.out_begin);
  }
  g.in = Shape(in);
  g.out = Shape(out);
  return g;
}

// The spatial extents (axes 2..) of a shape, and the output extents of windows over them.
inline Shape spatial_of(const Shape& s) {
  std::vector<std::int64_t> v;
  for (int a = 2; a < s.rank(); ++a) v.push_back(s[a]);
  return Shape(v);
}
inline Shape window_out(const Shape& spatial, const std::vector<ConvWindow>& windows) {
  std::vector<std::int64_t> v;
  for (int a = 0; a < spatial.rank(); ++a)
    v.push_back(window_output_extent(spatial[a], windows[static_cast<std::size_t>(a)]));
  return Shape(v);
}

}  // namespace distop::nn::detail
