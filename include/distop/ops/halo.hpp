#pragma once
// Halo widths: which input entries a part of a distributed convolution or pooling needs from its
// neighbours (DistDL's rule). Pure functions of the sizes, no communication.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/kernels/conv_window.hpp"

namespace distop {

// One part's halo along one axis. Global indices; ranges are half-open.
struct PartHalo {
  std::int64_t own_begin = 0, own_end = 0;    // the input block it owns (balanced over the parts)
  std::int64_t out_begin = 0, out_end = 0;    // the outputs it computes (balanced over the parts)
  std::int64_t need_begin = 0, need_end = 0;  // the inputs those outputs read, clipped to [0, n)
  // Signed widths: left = own_begin - need_begin, right = need_end - own_end. A positive width is
  // a ghost zone to receive from the neighbour on that side; a negative one is surplus: owned
  // input that the part's outputs do not read, which the layer trims. Always
  // (own_end - own_begin) + left + right == need_end - need_begin.
  std::int64_t left = 0, right = 0;
};

// DistDL's rule along one axis. The n inputs and the m = window_output_extent(n, w) outputs are
// each split balanced over `parts` (n / P each, the first n % P one more). Part c computes outputs
// [o_c, o_{c+1}), which read the inputs [o_c s - p, (o_{c+1} - 1) s - p + d (k - 1)] (the hull of
// the taps; with dilation it may include inputs between taps), clipped to [0, n). When that clipped
// range is empty (every output of the part lies in the padding) the part needs nothing:
// need_begin == need_end, placed inside the part's own block so both widths are surplus.
//
// Errors (distop::Error, the same for the same arguments on every rank): invalid window; more
// parts than inputs; fewer outputs than parts (a part would compute nothing); a positive width
// larger than the neighbour's block, i.e. a part that needs input beyond its adjacent neighbour.
std::vector<PartHalo> halo_widths(std::int64_t n, std::int64_t parts, const ConvWindow& w);

// Non-negative ghost widths of one part along one axis: the entries it holds beyond its interior
// on each side.
struct GhostWidths {
  std::int64_t left = 0;
  std::int64_t right = 0;
  friend bool operator==(const GhostWidths&, const GhostWidths&) = default;
};

// Ghost widths for a whole tensor: spec[axis][part], one entry per part along each tensor axis.
using HaloSpec = std::vector<std::vector<GhostWidths>>;

// The ghost widths for a tensor of shape `global`, split balanced over `grid` (tensor axis a by
// grid axis a), feeding a convolution or pooling with windows[a] along axis a: halo_widths per
// axis with the surplus (negative widths) clamped to zero. Errors as halo_widths, and unless
// global, grid and windows have the same rank.
HaloSpec halo_spec(const Shape& global, const Shape& grid, const std::vector<ConvWindow>& windows);

// ---- Transposed convolutions
// --------------------------------------------------------------------- A transposed convolution
// (torch's ConvTranspose{1,2,3}d) with window w along an axis scatters input i to the outputs t = i
// s - p + j d (j = 0 .. k - 1); outputs outside [0, m) are dropped. It is the adjoint of the
// convolution with the same window from m inputs to n outputs.

// The output extent m = (n - 1) s - 2 p + d (k - 1) + output_padding + 1 of a transposed
// convolution over n inputs. Error unless the window is valid (k, s, d >= 1, p >= 0), n >= 1,
// 0 <= output_padding < max(s, d) (torch's rule: smaller than either the stride or the dilation)
// and m >= 1.
std::int64_t transposed_output_extent(std::int64_t n, const ConvWindow& w,
                                      std::int64_t output_padding);

// The halo rule of a transposed convolution along one axis, in halo_widths' terms. The n inputs and
// the m = transposed_output_extent(n, w, output_padding) outputs are each split balanced over
// `parts`. Part c computes outputs [t_lo, t_hi), which receive from the inputs
// [ceil((t_lo + p - d (k - 1)) / s), floor((t_hi - 1 + p) / s)] (the hull of the inputs whose taps
// land in the block), clipped to [0, n); an empty range (every output of the part receives no
// input, only the bias) is placed inside the part's own block, so both widths are surplus. Widths,
// surplus and errors as halo_widths': invalid window or output padding, more parts than inputs,
// fewer outputs than parts, a part that needs input beyond its adjacent neighbour.
std::vector<PartHalo> transposed_halo_widths(std::int64_t n, std::int64_t parts,
                                             const ConvWindow& w, std::int64_t output_padding);

// halo_spec for a transposed convolution: transposed_halo_widths per axis (output_padding[a] on
// axis a), the surplus clamped to zero. Errors as transposed_halo_widths, and unless global, grid,
// windows and output_padding have the same rank.
HaloSpec transposed_halo_spec(const Shape& global, const Shape& grid,
                              const std::vector<ConvWindow>& windows,
                              const std::vector<std::int64_t>& output_padding);

}  // namespace distop
