#pragma once
// Interpolation and upsampling on the tape (torch.nn.functional.interpolate, torch.nn.Upsample):
// the functional forms, the local layer Interpolate<T> (batch and channel axes may be split) and
// DistributedInterpolate<T> over a split spatial domain.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/kernels/interpolate.hpp"
#include "distop/nn/axis_values.hpp"
#include "distop/nn/module.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/halo_pad.hpp"
#include "distop/ops/repartition.hpp"

namespace distop::nn {

using kernels::InterpolateMode;

// A per-axis scale factor, one value for every spatial axis or one per axis, as AxisValues is for
// integers: `{.scale_factor = 2}`, `{.scale_factor = {1.5, 0.5}}`. Empty: not given.
struct AxisScales {
  std::vector<double> values;

  AxisScales() = default;
  AxisScales(double v) : values{v} {}  // NOLINT: implicit, for {.scale_factor = 2}
  AxisScales(std::initializer_list<double> v) : values(v) {}
  AxisScales(std::vector<double> v) : values(std::move(v)) {}  // NOLINT: implicit

  bool empty() const noexcept { return values.empty(); }
  std::size_t size() const noexcept { return values.size(); }
};

// torch.nn.functional.interpolate's arguments (and torch.nn.Upsample's, with the same defaults).
// Exactly one of size and scale_factor. With a scale factor the output extent is
// floor(n * scale) and, unless recompute_scale_factor, the source index uses 1 / scale (torch's
// scales), not n / m; with recompute_scale_factor it uses n / m, as with a size.
struct InterpolateOptions {
  AxisValues size{};          // the output's spatial extents: one for every axis, or one per axis
  AxisScales scale_factor{};  // or the scale factors, likewise
  InterpolateMode mode = InterpolateMode::nearest;
  std::optional<bool> align_corners{};  // linear modes only (unset: false); set with a nearest
                                        // mode it is an Error, as in torch
  bool recompute_scale_factor = false;  // with a scale factor only
};

// torch's mode names: "nearest", "nearest-exact", "linear", "bilinear", "trilinear". An Error for
// any other (torch's "bicubic" and "area" are not implemented).
InterpolateMode parse_interpolate_mode(std::string_view name);

// The checks of the options that do not depend on the input (align_corners with a nearest mode,
// neither or both of size and scale_factor, more than 3 entries, a size below 1, a scale that is
// not a positive finite number, recompute_scale_factor with a size): an Error named `op`.
void check_interpolate_options(const InterpolateOptions& options, const char* op);

// The per-axis rule of an interpolation of an input [N, C, s_1..s_d] whose spatial extents are
// `spatial`: each axis's input and output extents and the scale torch's kernels see. Errors (named
// `op`) as torch raises them: d outside 1..3 or a linear mode of another d (linear needs [N, C, s],
// bilinear [N, C, h, w], trilinear [N, C, d, h, w]); align_corners with a nearest mode; neither or
// both of size and scale_factor; a count of sizes or scales other than 1 or d; a size below 1, a
// scale that is not a positive finite number, or an output extent floor(n * scale) below 1;
// recompute_scale_factor with a size.
std::vector<kernels::InterpolateAxis> interpolate_axes(const Shape& spatial,
                                                       const InterpolateOptions& options,
                                                       const char* op = "interpolate");

// y = the interpolation of every rank's local box through g (kernels/interpolate.hpp): x's local
// box [N, C, g.in...], y made in `out_space`, whose local box must be [N, C, g.out...]. Purely
// local; ranks outside x's partition, or with an empty box, compute nothing. The backward is the
// kernel's adjoint (the scatter-add of the weights, as a gather per input entry).
template <class T>
Var<T> interpolate_blocks(Tape& tape, const Var<T>& x, const kernels::InterpolateGeometry& g,
                          const TensorSpace& out_space);

// torch.nn.functional.interpolate(x, size, scale_factor, mode, align_corners,
// recompute_scale_factor) on x [N, C, s_1..s_d], d = 1 to 3, split along the batch and channel
// axes only (each rank interpolates its own samples and channels). The output lives on x's
// partition with x's batch and channel blocks.
//
//   auto y = nn::interpolate(tape, x, {.scale_factor = 2, .mode = nn::InterpolateMode::bilinear});
template <class T>
Var<T> interpolate(Tape& tape, const Var<T>& x, const InterpolateOptions& options);

// The layer form of interpolate: no parameters (torch.nn.Upsample). The options are checked at
// construction, as far as they do not depend on the input.
template <class T>
class Interpolate : public Module<T> {
 public:
  explicit Interpolate(InterpolateOptions options);
  const InterpolateOptions& options() const noexcept { return options_; }
  // x's space with the output's spatial extents: an Error unless x is [N, C, s..] split along the
  // batch and channel axes only.
  TensorSpace output_space(const TensorSpace& in) const;
  Var<T> forward(Tape& tape, const Var<T>& x) const;

 private:
  InterpolateOptions options_;
};

// torch.nn.Upsample: Interpolate with torch's defaults, which InterpolateOptions has (mode
// nearest, align_corners unset, no recompute).
template <class T>
using Upsample = Interpolate<T>;

// Interpolation of x [N, C, s_1..s_d] split over a partition with one grid axis per tensor axis
// (the spatial axes, and possibly the batch and channel axes; blocks balanced or uneven):
//
//   x --Repartition-->  the spatial axes balanced           (only where x's own blocks do not do)
//     --HaloPad, HaloExchange-->  each rank's block plus the ghost zones its outputs read
//     --local interpolation-->    y [N, C, m..]: x's batch and channel blocks, the spatial axes
//                                 balanced over the same grid
//
// The halo rule follows from the index rule: along a spatial axis, the part with outputs
// [o_b, o_e) reads the inputs [min_o i0(o), max_o i1(o)] (interpolate_taps; a nearest mode has
// i1 = i0, a linear mode adds the right neighbour). Against the part's own block [b, e) the signed
// widths are left = b - min, right = max + 1 - e: a positive width is a ghost zone, a negative one
// owned input the part does not read, which the local kernel skips (its in_begin). Every width
// must fit in the adjacent neighbour's block. x's own blocks are used when they fit; otherwise,
// if x's spatial blocks are not balanced, x is first repartitioned to balanced spatial blocks;
// if the widths still do not fit (heavy downsampling over small blocks) it is an Error on every
// rank that names the axis and the part. The output extent must be at least the number of parts
// along each split axis (a part would compute nothing). The adjoint is the composition's: the
// kernel's scatter-add of the weights, HaloExchange* adds the ghost gradients into their owners,
// HaloPad* keeps the interior, Repartition* sends the gradient back to x's blocks. Each rank's
// output equals the one-rank interpolation's entries of the same global indices exactly (the same
// taps and arithmetic). Plans are built once per input space; construction moves nothing, forward
// is collective over x's partition's parent.
template <class T>
class DistributedInterpolate : public Module<T> {
 public:
  explicit DistributedInterpolate(InterpolateOptions options);
  const InterpolateOptions& options() const noexcept { return options_; }
  // [N, C, m..] on x's partition: x's batch and channel blocks, the spatial axes balanced. Builds
  // (and keeps) the plans for `in`, so it is collective over in's partition's parent, as forward.
  TensorSpace output_space(const TensorSpace& in);
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  struct Plans {
    std::shared_ptr<const Repartition<T>> balance;  // null: x's blocks serve
    std::shared_ptr<const HaloPad<T>> pad;          // null with halo
    std::shared_ptr<const HaloExchange<T>> halo;    // null: no part reads a neighbour's input
    TensorSpace out_space;
    kernels::InterpolateGeometry geometry;  // this rank's (empty outside the partition)
  };
  const Plans& plans(const TensorSpace& x_space);

  InterpolateOptions options_;
  std::vector<std::pair<TensorSpace, Plans>> plans_;
};

// DistDL's name for it.
template <class T>
using DistributedUpsample = DistributedInterpolate<T>;

extern template class Interpolate<float>;
extern template class Interpolate<double>;
extern template class DistributedInterpolate<float>;
extern template class DistributedInterpolate<double>;

}  // namespace distop::nn
