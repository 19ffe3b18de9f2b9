#include "distop/nn/pool.hpp"

#include <utility>

#include "common.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/pool.hpp"

namespace distop::nn {

namespace {

// [N, C, extents...] from a box [N, C, ...].
Shape planes_with(const Shape& box, const Shape& extents) {
  std::vector<std::int64_t> s{box[0], box[1]};
  s.insert(s.end(), extents.begin(), extents.end());
  return Shape(std::move(s));
}

// Checks x's and out_space's local boxes against g on this rank; returns whether the rank holds
// entries (and so computes).
template <class T>
bool check_boxes(const Var<T>& x, const kernels::WindowGeometry& g, const TensorSpace& out_space,
                 const char* op) {
  const Shape& xb = x.space().local_shape();
  const Shape& yb = out_space.local_shape();
  if (!x.space().partition().active()) {
    // A rank outside the layer's partition holds nothing and has no window.
    DISTOP_CHECK(yb.numel() == 0, op, "this rank holds no input but an output box ", yb.str());
    return false;
  }
  g.validate(op);
  DISTOP_CHECK(xb.rank() == g.dims() + 2 && yb.rank() == g.dims() + 2, op, "expected an input and ",
               "an output of rank ", g.dims() + 2, " ([N, C, spatial...]) for ", g.dims(),
               " spatial axes, found the boxes ", xb.str(), " and ", yb.str());
  if (xb.numel() == 0) {
    DISTOP_CHECK(yb.numel() == 0, op, "this rank holds no input but an output box ", yb.str());
    return false;
  }
  DISTOP_CHECK(xb == planes_with(xb, g.in), op, "the input box ", xb.str(),
               " does not match the window ", g.str());
  DISTOP_CHECK(yb == planes_with(xb, g.out), op, "the output box ", yb.str(), " does not match ",
               planes_with(xb, g.out).str(), " (the input box ", xb.str(), " through the window ",
               g.str(), ")");
  return true;
}

}  // namespace

template <class T>
Var<T> max_pool(Tape& tape, const Var<T>& x, const kernels::WindowGeometry& g,
                const TensorSpace& out_space) {
  return make_function<T>(tape, "max_pool", {x}, [&] {
    const bool active = check_boxes(x, g, out_space, "max_pool");
    auto y = DistTensor<T>::uninitialized(out_space);
    kernels::ArgmaxView argmax;
    if (active) kernels::max_pool_forward(x.value().local(), y.local(), argmax, g);
    return Computed{std::move(y), [argmax, active](const DistTensor<T>& dy, Gradients<T>& grads) {
                      // Every rank adds a gradient (zero where it holds nothing) so that whether a
                      // Var has one is the same on all ranks, which the adjoints of collective
                      // operations upstream rely on.
                      if (!active) {
                        grads.input(0).grad();
                        return;
                      }
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        kernels::max_pool_backward(dy.local(), argmax, beta, dx);
                      });
                    }};
  });
}

template <class T>
Var<T> avg_pool(Tape& tape, const Var<T>& x, const kernels::WindowGeometry& g,
                const TensorSpace& out_space) {
  return make_function<T>(tape, "avg_pool", {x}, [&] {
    const bool active = check_boxes(x, g, out_space, "avg_pool");
    auto y = DistTensor<T>::uninitialized(out_space);
    if (active) kernels::avg_pool_forward(x.value().local(), y.local(), g);
    return Computed{std::move(y), [g, active](const DistTensor<T>& dy, Gradients<T>& grads) {
                      if (!active) {
                        grads.input(0).grad();
                        return;
                      }
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        kernels::avg_pool_backward(dy.local(), beta, dx, g);
                      });
                    }};
  });
}

std::vector<ConvWindow> pool_windows(int dims, const AxisValues& kernel,
                                     const PoolOptions& options) {
  constexpr const char* op = "pool_windows";
  DISTOP_CHECK(dims >= 1 && dims <= 3, op, "pooling has 1 to 3 spatial axes, found ", dims);
  const auto d = static_cast<std::size_t>(dims);
  // The value of a per-axis option on axis a: its single entry, or entry a of d.
  auto per_axis = [&](const AxisValues& values, const char* name) {
    const std::vector<std::int64_t>& v = values.values;
    DISTOP_CHECK(v.size() == 1 || v.size() == d, op, "expected 1 or ", dims, " entries of ", name,
                 ", found ", v.size());
    return [&v](std::size_t a) { return v.size() == 1 ? v[0] : v[a]; };
  };
  const auto k = per_axis(kernel, "kernel");
  const auto& stride_v = options.stride.empty() ? kernel : options.stride;
  const auto s = per_axis(stride_v, "stride");
  const auto p = per_axis(options.padding, "padding");
  const auto dl = per_axis(options.dilation, "dilation");
  std::vector<ConvWindow> windows(d);
  for (std::size_t a = 0; a < d; ++a) {
    ConvWindow& w = windows[a];
    w = ConvWindow{k(a), s(a), p(a), dl(a)};
    DISTOP_CHECK(w.kernel >= 1 && w.stride >= 1 && w.dilation >= 1 && w.padding >= 0, op,
                 "invalid window ", w.str(), " on axis ", a,
                 ": kernel, stride and dilation must be at least 1 and padding at least 0");
    DISTOP_CHECK(2 * w.padding <= w.kernel, op, "window ", w.str(), " on axis ", a,
                 ": the padding must be at most half the kernel");
  }
  return windows;
}

template <class T>
Pool<T>::Pool(PoolKind kind, int dims, AxisValues kernel, PoolOptions options)
    : kind_(kind), windows_(pool_windows(dims, kernel, options)) {}

template <class T>
TensorSpace Pool<T>::output_space(const TensorSpace& in) const {
  const int d = static_cast<int>(windows_.size());
  DISTOP_CHECK(in.rank() == d + 2, "Pool", "expected an input [N, C, s_1..s_", d, "], found ",
               in.str());
  for (int a = 1; a < in.rank(); ++a)
    DISTOP_CHECK(in.decomposition().parts(a) == 1, "Pool",
                 "a local pooling layer takes inputs split along the batch axis only, found ",
                 in.str());
  TensorSpace out = in;
  for (int a = 0; a < d; ++a)
    out = out.with_extent(a + 2, window_output_extent(in.global_shape()[a + 2],
                                                      windows_[static_cast<std::size_t>(a)]));
  return out;
}

template <class T>
Var<T> Pool<T>::forward(Tape& tape, const Var<T>& x) const {
  const trace::Compute span("Pool", this->registered_path());
  const TensorSpace out = output_space(x.space());
  const Shape& global = x.space().global_shape();
  const auto g = kernels::WindowGeometry::ordinary(
      Shape(std::vector<std::int64_t>(global.begin() + 2, global.end())), windows_);
  return kind_ == PoolKind::max ? max_pool(tape, x, g, out) : avg_pool(tape, x, g, out);
}

#define DISTOP_INSTANTIATE(T)                                                    \
  template Var<T> max_pool(Tape&, const Var<T>&, const kernels::WindowGeometry&, \
                           const TensorSpace&);                                  \
  template Var<T> avg_pool(Tape&, const Var<T>&, const kernels::WindowGeometry&, \
                           const TensorSpace&);                                  \
  template class Pool<T>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
