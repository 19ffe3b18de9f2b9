#include "distop/nn/distributed_conv.hpp"

#include <cmath>
#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/functional.hpp"
#include "distop/nn/init.hpp"
#include "spatial.hpp"

namespace distop::nn {

namespace {

constexpr const char* kOp = "DistributedConv";

// The ranks of p whose coordinate on each of `axes` is 0.
Partition slice_zero(Partition p, int first_axis) {
  for (int a = first_axis; a < p.dim(); ++a) p = p.slice(a, 0);
  return p;
}

// The weight partition, after checking it fits the layer.
const Partition& checked(const Partition& p, int dims, std::int64_t in, std::int64_t out) {
  DISTOP_CHECK(p.dim() == dims + 2, kOp, "a ", dims,
               "-d convolution needs a weight partition of grid [P_co, P_ci, S_1..S_", dims,
               "], found ", p.str());
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

}  // namespace

template <class T>
DistributedConv<T>::DistributedConv(int dims, std::int64_t in_channels, std::int64_t out_channels,
                                    AxisValues kernel, const Partition& weight_partition,
                                    ConvOptions options)
    : dims_(dims),
      in_(in_channels),
      out_(out_channels),
      windows_(conv_windows(dims, kernel, options)),
      p_w_(checked(weight_partition, dims, in_channels, out_channels)),
      p_x_(p_w_.slice(0, 0)),
      p_y_(p_w_.slice(1, 0)),
      p_out_(output_grid(p_y_)),
      p_wh_(slice_zero(p_w_, 2)),
      p_bh_(p_wh_.slice(1, 0)) {
  const Shape& grid = p_w_.shape();
  std::vector<std::int64_t> k;
  std::int64_t fan_in = in_;
  for (const auto& w : windows_) {
    k.push_back(w.kernel);
    fan_in *= w.kernel;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  DistTensor<T> w(TensorSpace(concat({out_, in_}, Shape(k)), p_wh_));
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
Var<T>& DistributedConv<T>::bias() {
  DISTOP_CHECK(has_bias(), kOp, "the layer was made without a bias");
  return bias_;
}

template <class T>
TensorSpace DistributedConv<T>::input_space(std::int64_t batch, const Shape& spatial) const {
  return TensorSpace(concat({batch, in_}, spatial), p_x_);
}

template <class T>
TensorSpace DistributedConv<T>::output_space(std::int64_t batch, const Shape& spatial) const {
  return TensorSpace(concat({batch, out_}, detail::window_out(spatial, windows_)), p_out_);
}

template <class T>
const typename DistributedConv<T>::Plans& DistributedConv<T>::plans(const TensorSpace& x_space) {
  const Shape& g = x_space.global_shape();
  auto it = plans_.find(g.extents());
  if (it != plans_.end()) return it->second;
  const Shape spatial = detail::spatial_of(g);
  const Shape out = detail::window_out(spatial, windows_);
  Plans p;
  TensorSpace padded = x_space;
  if (detail::needs_halo(g, x_space.partition().shape(), windows_)) {
    p.halo = std::make_shared<const HaloExchange<T>>(x_space, detail::halo_windows(windows_));
    p.pad = std::make_shared<const HaloPad<T>>(p.halo);
    padded = p.halo->range();
  }
  if (x_plan_) {
    p.broadcast_x = std::make_shared<const Broadcast<T>>(x_plan_, padded);
    padded = p.broadcast_x->range();
  }
  std::vector<int> axis_map{-1, 0};
  for (int a = 0; a < dims_; ++a) axis_map.push_back(a + 2);
  const Shape y_shape = concat({g[0], out_}, out);
  TensorSpace y_space(p_y_, Decomposition::balanced(y_shape, p_y_.shape(), axis_map));
  if (y_plan_) {
    p.reduce_y = std::make_shared<const SumReduce<T>>(y_plan_, y_space);
    p.z_space = p.reduce_y->domain();
  } else {
    p.z_space = TensorSpace(p_w_, Decomposition::balanced(y_shape, p_w_.shape(), axis_map));
  }
  p.out_space = TensorSpace(y_shape, p_out_);
  if (p_w_.active()) {
    const auto& c = p_w_.coords();
    const std::vector<int> coords(c.begin() + 2, c.end());
    p.geometry = detail::local_geometry(spatial, detail::spatial_of(p_w_.shape()), coords, windows_,
                                        detail::spatial_of(padded.local_shape()));
  }
  return plans_.emplace(g.extents(), std::move(p)).first->second;
}

template <class T>
Var<T> DistributedConv<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedConv", this->registered_path());
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
  Var<T> z = conv<T>(tape, xw, w, b, p.geometry, p.z_space);
  Var<T> y = p.reduce_y ? apply<T>(tape, p.reduce_y, z) : z;
  return reinterpret(tape, y, p.out_space);
}

template class DistributedConv<float>;
template class DistributedConv<double>;

}  // namespace distop::nn
