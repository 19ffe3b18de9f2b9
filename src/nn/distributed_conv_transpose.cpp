#include "distop/nn/distributed_conv_transpose.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/functional.hpp"
#include "distop/nn/init.hpp"
#include "distop/ops/halo.hpp"
#include "spatial.hpp"

namespace distop::nn {

namespace {

constexpr const char* kOp = "DistributedConvTranspose";

// The ranks of p whose coordinate on each axis from `first_axis` on is 0.
Partition slice_zero(Partition p, int first_axis) {
  for (int a = first_axis; a < p.dim(); ++a) p = p.slice(a, 0);
  return p;
}

// The weight partition, after checking it fits the layer.
const Partition& checked(const Partition& p, int dims, std::int64_t in, std::int64_t out) {
  DISTOP_CHECK(p.dim() == dims + 2, kOp, "a ", dims,
               "-d transposed convolution needs a weight partition of grid [P_co, P_ci, S_1..S_",
               dims, "], found ", p.str());
  DISTOP_CHECK(in > 0 && out > 0, kOp, "channel counts must be positive, found in ", in,
               " and out ", out);
  DISTOP_CHECK(out >= p.shape()[0] && in >= p.shape()[1], kOp, "[", out, ", ", in,
               "] channels cannot be split over ", p.str(), ": a block would be empty");
  return p;
}

// The output ranks (ci = 0, grid [P_co, 1, S..]) as a [1, P_co, S..] grid.
Partition output_grid(const Partition& p_y) {
  std::vector<std::int64_t> g{1, p_y.shape()[0]};
  for (int a = 2; a < p_y.dim(); ++a) g.push_back(p_y.shape()[a]);
  return p_y.reshape(Shape(g));
}

Shape concat(std::vector<std::int64_t> head, const Shape& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return Shape(std::move(head));
}

// The ghost widths a [N, C, s..] input split balanced over `grid` needs (none on the batch and
// channel axes: a one-tap window of stride 1 reads only its own entry), or an empty spec when the
// grid splits no spatial axis. The same on every rank, errors included (a pure function of the
// sizes).
HaloSpec input_halo(const Shape& global, const Shape& grid, const ConvTransposeWindows& w) {
  if (!detail::splits_spatial(grid)) return {};
  const std::vector<ConvWindow> windows = detail::halo_windows(w.windows);
  std::vector<std::int64_t> output_padding{0, 0};
  output_padding.insert(output_padding.end(), w.output_padding.begin(), w.output_padding.end());
  try {
    return transposed_halo_spec(global, grid, windows, output_padding);
  } catch (const Error& e) {
    throw Error(kOp, e.detail());
  }
}

bool any_width(const HaloSpec& spec) {
  for (const auto& axis : spec)
    for (const GhostWidths& g : axis)
      if (g.left > 0 || g.right > 0) return true;
  return false;
}

// The geometry of the local transposed convolution on the rank at spatial grid coordinates
// `coords`, whose local input is its block of the spatial extents `global` split balanced into
// `parts`, extended by the ghost zones HaloExchange fills (positive widths only), of spatial
// extents `local_in`. It computes its balanced block [t_lo, t_hi) of the outputs. Output t receives
// input i through tap j when t = i s - p + j d; with the local array starting at global input i_lo
// and the local output at t_lo, t - t_lo = (i - i_lo) s - (t_lo + p - i_lo s) + j d: the
// convolution geometry (input: the outputs, output: the local inputs) with offset t_lo + p - i_lo
// s. Inputs the part holds but does not need (surplus) only reach outputs outside the block, which
// the kernel drops.
kernels::WindowGeometry local_geometry(const Shape& global, const Shape& parts,
                                       const std::vector<int>& coords,
                                       const ConvTransposeWindows& w, const Shape& local_in) {
  kernels::WindowGeometry g;
  std::vector<std::int64_t> in, out;
  for (std::size_t a = 0; a < w.windows.size(); ++a) {
    const ConvWindow& cw = w.windows[a];
    const int ax = static_cast<int>(a);
    const auto halos = transposed_halo_widths(global[ax], parts[ax], cw, w.output_padding[a]);
    const PartHalo& ph = halos.at(static_cast<std::size_t>(coords[a]));
    const std::int64_t start = ph.own_begin - std::max<std::int64_t>(ph.left, 0);
    g.kernel.push_back(cw.kernel);
    g.stride.push_back(cw.stride);
    g.dilation.push_back(cw.dilation);
    g.offset.push_back(ph.out_begin + cw.padding - start * cw.stride);
    in.push_back(ph.out_end - ph.out_begin);
    out.push_back(local_in[ax]);
  }
  g.in = Shape(in);
  g.out = Shape(out);
  return g;
}

}  // namespace

template <class T>
DistributedConvTranspose<T>::DistributedConvTranspose(int dims, std::int64_t in_channels,
                                                      std::int64_t out_channels, AxisValues kernel,
                                                      const Partition& weight_partition,
                                                      ConvTransposeOptions options)
    : dims_(dims),
      in_(in_channels),
      out_(out_channels),
      windows_(conv_transpose_windows(dims, kernel, options)),
      p_w_(checked(weight_partition, dims, in_channels, out_channels)),
      p_x_(p_w_.slice(0, 0)),
      p_y_(p_w_.slice(1, 0)),
      p_out_(output_grid(p_y_)),
      p_wh_(slice_zero(p_w_, 2)),
      p_bh_(p_wh_.slice(1, 0)) {
  const Shape& grid = p_w_.shape();
  std::vector<std::int64_t> k;
  // torch's fan_in of a weight [C, O, k..]: its second extent times the kernel size.
  std::int64_t fan_in = out_;
  for (const auto& w : windows_.windows) {
    k.push_back(w.kernel);
    fan_in *= w.kernel;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  // [C, O, k..]: C (axis 0) split by grid axis 1 (P_ci), O (axis 1) by grid axis 0 (P_co).
  std::vector<int> w_map{1, 0};
  for (int a = 0; a < dims_; ++a) w_map.push_back(a + 2);
  const Shape w_shape = concat({in_, out_}, Shape(k));
  DistTensor<T> w(TensorSpace(p_wh_, Decomposition::balanced(w_shape, p_wh_.shape(), w_map)));
  uniform_init(w, parameter_seed(options.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
  const bool spatial = detail::splits_spatial(grid);
  if (spatial) broadcast_w_ = std::make_shared<const Broadcast<T>>(weight_.space(), p_w_);
  if (options.bias) {
    DistTensor<T> b(TensorSpace(p_bh_, Decomposition::balanced(Shape{out_}, p_bh_.shape(), {0})));
    uniform_init(b, parameter_seed(options.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(b), true));
    if (spatial) broadcast_b_ = std::make_shared<const Broadcast<T>>(bias_.space(), p_y_);
  }
  if (grid[0] > 1) x_plan_ = std::make_shared<const BroadcastPlan>(p_x_, p_w_);
  if (grid[1] > 1) y_plan_ = std::make_shared<const BroadcastPlan>(p_y_, p_w_);
}

template <class T>
Var<T>& DistributedConvTranspose<T>::bias() {
  DISTOP_CHECK(has_bias(), kOp, "the layer was made without a bias");
  return bias_;
}

template <class T>
TensorSpace DistributedConvTranspose<T>::input_space(std::int64_t batch,
                                                     const Shape& spatial) const {
  return TensorSpace(concat({batch, in_}, spatial), p_x_);
}

template <class T>
TensorSpace DistributedConvTranspose<T>::output_space(std::int64_t batch,
                                                      const Shape& spatial) const {
  Shape out;
  try {
    out = conv_transpose_out(spatial, windows_);
  } catch (const Error& e) {
    throw Error(kOp, e.detail());
  }
  return TensorSpace(concat({batch, out_}, out), p_out_);
}

template <class T>
const typename DistributedConvTranspose<T>::Plans& DistributedConvTranspose<T>::plans(
    const TensorSpace& x_space) {
  const Shape& g = x_space.global_shape();
  auto it = plans_.find(g.extents());
  if (it != plans_.end()) return it->second;
  const Shape spatial = detail::spatial_of(g);
  const Shape out = output_space(g[0], spatial).global_shape();
  Plans p;
  TensorSpace padded = x_space;
  // Every rank derives the same spec (and raises the same Error for a halo beyond a neighbour).
  const HaloSpec spec = input_halo(g, x_space.partition().shape(), windows_);
  if (any_width(spec)) {
    p.halo = std::make_shared<const HaloExchange<T>>(x_space, spec);
    p.pad = std::make_shared<const HaloPad<T>>(p.halo);
    padded = p.halo->range();
  }
  if (x_plan_) {
    p.broadcast_x = std::make_shared<const Broadcast<T>>(x_plan_, padded);
    padded = p.broadcast_x->range();
  }
  std::vector<int> axis_map{-1, 0};
  for (int a = 0; a < dims_; ++a) axis_map.push_back(a + 2);
  TensorSpace y_space(p_y_, Decomposition::balanced(out, p_y_.shape(), axis_map));
  if (y_plan_) {
    p.reduce_y = std::make_shared<const SumReduce<T>>(y_plan_, y_space);
    p.z_space = p.reduce_y->domain();
  } else {
    p.z_space = TensorSpace(p_w_, Decomposition::balanced(out, p_w_.shape(), axis_map));
  }
  p.out_space = TensorSpace(out, p_out_);
  if (p_w_.active()) {
    const auto& c = p_w_.coords();
    const std::vector<int> coords(c.begin() + 2, c.end());
    p.geometry = local_geometry(spatial, detail::spatial_of(p_w_.shape()), coords, windows_,
                                detail::spatial_of(padded.local_shape()));
  }
  return plans_.emplace(g.extents(), std::move(p)).first->second;
}

template <class T>
Var<T> DistributedConvTranspose<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedConvTranspose", this->registered_path());
  const Shape& g = x.space().global_shape();
  DISTOP_CHECK(g.rank() == dims_ + 2 && g[1] == in_, kOp, "expected an input [N, ", in_, ", ",
               dims_, " spatial extents], found ", g.str());
  check_space(x.value(), input_space(g[0], detail::spatial_of(g)), kOp, "the input");
  const Plans& p = plans(x.space());
  Var<T> xh = p.halo ? apply<T>(tape, p.halo, apply<T>(tape, p.pad, x)) : x;
  Var<T> xw = p.broadcast_x ? apply<T>(tape, p.broadcast_x, xh) : xh;
  Var<T> w = broadcast_w_ ? apply<T>(tape, broadcast_w_, weight_) : weight_;
  Var<T> b;
  if (has_bias()) {
    Var<T> bb = broadcast_b_ ? apply<T>(tape, broadcast_b_, bias_) : bias_;
    // Added once per output: by the ranks with ci = 0, before the sum over ci.
    if (p_w_.active() && p_w_.coords()[1] == 0) b = bb;
  }
  Var<T> z = conv_transpose<T>(tape, xw, w, b, p.geometry, p.z_space);
  Var<T> y = p.reduce_y ? apply<T>(tape, p.reduce_y, z) : z;
  return reinterpret(tape, y, p.out_space);
}

template class DistributedConvTranspose<float>;
template class DistributedConvTranspose<double>;

}  // namespace distop::nn
