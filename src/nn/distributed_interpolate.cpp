#include <algorithm>
#include <string>
#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/interpolate.hpp"

namespace distop::nn {

namespace {

constexpr const char* kOp = "DistributedInterpolate";

std::vector<std::int64_t> extents_of(const std::vector<std::int64_t>& bounds) {
  std::vector<std::int64_t> e;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) e.push_back(bounds[i + 1] - bounds[i]);
  return e;
}

// One part's signed halo widths along one spatial axis (left = own_begin - need_begin, right =
// need_end - own_end; negative: owned input the part does not read).
struct Widths {
  std::int64_t left = 0, right = 0;
};

// The widths of every part along one axis, for input blocks `in_bounds` and balanced output
// blocks `out_bounds`, from the index rule (the taps are nondecreasing in o, but the extremes are
// taken over the whole block anyway).
template <class T>
std::vector<Widths> axis_widths(const kernels::InterpolateAxis& axis, InterpolateMode mode,
                                bool align_corners, const std::vector<std::int64_t>& in_bounds,
                                const std::vector<std::int64_t>& out_bounds) {
  std::vector<Widths> w;
  for (std::size_t c = 0; c + 1 < out_bounds.size(); ++c) {
    std::int64_t lo = axis.in, hi = -1;
    for (std::int64_t o = out_bounds[c]; o < out_bounds[c + 1]; ++o) {
      const auto t = kernels::interpolate_taps<T>(axis, mode, align_corners, o);
      lo = std::min(lo, t.i0);
      hi = std::max(hi, t.i1);
    }
    w.push_back({in_bounds[c] - lo, hi + 1 - in_bounds[c + 1]});
  }
  return w;
}

// The first part whose positive widths do not fit in its neighbours' blocks, or -1.
std::int64_t first_misfit(const std::vector<Widths>& w, const std::vector<std::int64_t>& bounds) {
  const auto parts = static_cast<std::int64_t>(w.size());
  for (std::int64_t c = 0; c < parts; ++c) {
    const auto u = static_cast<std::size_t>(c);
    const std::int64_t left_room = c > 0 ? bounds[u] - bounds[u - 1] : 0;
    const std::int64_t right_room = c + 1 < parts ? bounds[u + 2] - bounds[u + 1] : 0;
    if (w[u].left > left_room || w[u].right > right_room) return c;
  }
  return -1;
}

}  // namespace

template <class T>
DistributedInterpolate<T>::DistributedInterpolate(InterpolateOptions options)
    : options_(std::move(options)) {
  check_interpolate_options(options_, kOp);
}

template <class T>
TensorSpace DistributedInterpolate<T>::output_space(const TensorSpace& in) {
  return plans(in).out_space;
}

template <class T>
const typename DistributedInterpolate<T>::Plans& DistributedInterpolate<T>::plans(
    const TensorSpace& x_space) {
  for (const auto& [space, p] : plans_)
    if (space == x_space) return p;
  const Shape& g = x_space.global_shape();
  const Partition& part = x_space.partition();
  const Decomposition& dec = x_space.decomposition();
  const int rank = g.rank();
  DISTOP_CHECK(rank >= 3 && rank <= 5 && part.dim() == rank, kOp,
               "expected an input [N, C, s_1..s_d] (d = 1 to 3) on a partition with one grid axis "
               "per tensor axis, found ",
               x_space.str());
  const Shape& grid = part.shape();
  for (int a = 0; a < rank; ++a)
    DISTOP_CHECK(dec.parts(a) == grid[a] && (grid[a] == 1 || dec.split_by(a) == a), kOp,
                 "tensor axis ", a, " must be split by grid axis ", a,
                 " (no grid axis may replicate), found ", x_space.str());
  const auto axes =
      interpolate_axes(Shape(std::vector<std::int64_t>(g.begin() + 2, g.end())), options_, kOp);
  const InterpolateMode mode = options_.mode;
  const bool align = options_.align_corners.value_or(false);
  const auto d = axes.size();

  // Per spatial axis: the balanced output blocks, and the widths against x's input blocks.
  std::vector<std::vector<std::int64_t>> out_bounds(d), in_bounds(d);
  std::vector<std::vector<Widths>> widths(d);
  bool fits = true;
  for (std::size_t a = 0; a < d; ++a) {
    const int ax = static_cast<int>(a) + 2;
    DISTOP_CHECK(axes[a].out >= grid[ax], kOp, "the output extent ", axes[a].out,
                 " along spatial axis ", a, " is smaller than its ", grid[ax],
                 " parts: a part would compute nothing (input ", x_space.str(), ")");
    out_bounds[a] = balanced_bounds(axes[a].out, grid[ax]);
    in_bounds[a] = dec.bounds(ax);
    widths[a] = axis_widths<T>(axes[a], mode, align, in_bounds[a], out_bounds[a]);
    fits = fits && first_misfit(widths[a], in_bounds[a]) < 0;
  }

  Plans p;
  TensorSpace interior = x_space;
  std::vector<std::vector<std::int64_t>> extents;  // of the interior, per tensor axis
  for (int a = 0; a < 2; ++a) extents.push_back(extents_of(dec.bounds(a)));
  if (!fits) {
    // The spatial axes balanced over the same grid, x's batch and channel blocks kept.
    for (std::size_t a = 0; a < d; ++a) {
      const int ax = static_cast<int>(a) + 2;
      in_bounds[a] = balanced_bounds(g[ax], grid[ax]);
      widths[a] = axis_widths<T>(axes[a], mode, align, in_bounds[a], out_bounds[a]);
      const std::int64_t c = first_misfit(widths[a], in_bounds[a]);
      const auto u = static_cast<std::size_t>(std::max<std::int64_t>(c, 0));
      DISTOP_CHECK(c < 0, kOp, "along spatial axis ", a, ", part ", c, " computes the outputs [",
                   out_bounds[a][u], ", ", out_bounds[a][u + 1], "), which read the inputs [",
                   in_bounds[a][u] - widths[a][u].left, ", ",
                   in_bounds[a][u + 1] + widths[a][u].right,
                   "), beyond its adjacent parts' blocks ", "of the balanced input split ",
                   Shape(in_bounds[a]).str(),
                   ": the halo would reach past a neighbour (downsampling too strong for ",
                   grid[ax], " parts of ", g[ax], " inputs; use fewer parts along this axis)");
    }
    for (std::size_t a = 0; a < d; ++a) extents.push_back(extents_of(in_bounds[a]));
    interior = TensorSpace(part, Decomposition::blocks(g, grid, extents));
    if (!(interior == x_space))
      p.balance = std::make_shared<const Repartition<T>>(x_space, interior);
  } else {
    for (std::size_t a = 0; a < d; ++a) extents.push_back(extents_of(in_bounds[a]));
  }

  // The output: the interior's batch and channel blocks, the spatial axes balanced.
  std::vector<std::int64_t> out_shape{g[0], g[1]};
  std::vector<std::vector<std::int64_t>> out_extents{extents[0], extents[1]};
  for (std::size_t a = 0; a < d; ++a) {
    out_shape.push_back(axes[a].out);
    out_extents.push_back(extents_of(out_bounds[a]));
  }
  p.out_space = TensorSpace(part, Decomposition::blocks(Shape(out_shape), grid, out_extents));

  // Ghost zones: the positive widths; none on the batch and channel axes.
  HaloSpec spec;
  bool ghosts = false;
  for (int a = 0; a < 2; ++a) spec.emplace_back(static_cast<std::size_t>(grid[a]), GhostWidths{});
  for (std::size_t a = 0; a < d; ++a) {
    std::vector<GhostWidths> axis;
    for (const Widths& w : widths[a]) {
      axis.push_back({std::max<std::int64_t>(w.left, 0), std::max<std::int64_t>(w.right, 0)});
      ghosts = ghosts || w.left > 0 || w.right > 0;
    }
    spec.push_back(std::move(axis));
  }
  TensorSpace padded = interior;
  if (ghosts) {
    p.halo = std::make_shared<const HaloExchange<T>>(interior, spec);
    p.pad = std::make_shared<const HaloPad<T>>(p.halo);
    padded = p.halo->range();
  }

  if (part.active()) {
    const auto& coords = part.coords();
    kernels::InterpolateGeometry& geo = p.geometry;
    geo.mode = mode;
    geo.align_corners = align;
    geo.axes = axes;
    std::vector<std::int64_t> in, out;
    for (std::size_t a = 0; a < d; ++a) {
      const auto c = static_cast<std::size_t>(coords[a + 2]);
      geo.in_begin.push_back(in_bounds[a][c] - spec[a + 2][c].left);
      geo.out_begin.push_back(out_bounds[a][c]);
      in.push_back(padded.local_shape()[static_cast<int>(a) + 2]);
      out.push_back(out_bounds[a][c + 1] - out_bounds[a][c]);
    }
    geo.in = Shape(in);
    geo.out = Shape(out);
  }
  plans_.emplace_back(x_space, std::move(p));
  return plans_.back().second;
}

template <class T>
Var<T> DistributedInterpolate<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedInterpolate", this->registered_path());
  const Plans& p = plans(x.space());
  Var<T> xb = p.balance ? apply<T>(tape, p.balance, x) : x;
  Var<T> xh = p.halo ? apply<T>(tape, p.halo, apply<T>(tape, p.pad, xb)) : xb;
  return interpolate_blocks<T>(tape, xh, p.geometry, p.out_space);
}

template class DistributedInterpolate<float>;
template class DistributedInterpolate<double>;

}  // namespace distop::nn
