#include "distop/nn/conv.hpp"

#include <cmath>
#include <memory>
#include <utility>

#include "common.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/conv.hpp"
#include "distop/nn/init.hpp"

namespace distop::nn {

namespace {

// A parameter of global shape `shape`, replicated over every rank of the partition.
TensorSpace replicated(const Partition& p, const Shape& shape) {
  return TensorSpace(
      p, Decomposition::balanced(shape, p.shape(),
                                 std::vector<int>(static_cast<std::size_t>(shape.rank()), -1)));
}

// [a, b, extents...]
Shape with_leading(std::int64_t a, std::int64_t b, const std::vector<std::int64_t>& extents) {
  std::vector<std::int64_t> e{a, b};
  e.insert(e.end(), extents.begin(), extents.end());
  return Shape(std::move(e));
}

}  // namespace

template <class T>
Var<T> conv(Tape& tape, const Var<T>& x, const Var<T>& w, const Var<T>& b,
            const kernels::WindowGeometry& g, const TensorSpace& out_space) {
  constexpr const char* kOp = "nn::conv";
  DISTOP_CHECK(x.defined() && w.defined(), kOp, "x and w must be defined Vars");
  // Whether this rank holds a box of the input (and so computes); a rank outside the partition
  // has no window.
  const bool active = x.space().partition().active();
  auto compute = [&](bool recording) {
    auto y = DistTensor<T>::uninitialized(out_space);
    std::shared_ptr<kernels::ConvColumns<T>> columns;
    if (active) {
      g.validate(kOp);
      const Tensor<T>& xl = x.value().local();
      const Tensor<T>& wl = w.value().local();
      DISTOP_CHECK(xl.rank() == g.dims() + 2 && wl.rank() == g.dims() + 2, kOp,
                   "expected x's box [N, C, in...] and w's [O, C, k...] with ", g.dims(),
                   " spatial axes, found x ", xl.shape().str(), " and w ", wl.shape().str());
      const Shape expected = with_leading(xl.extent(0), wl.extent(0), g.out.extents());
      DISTOP_CHECK(y.local().shape() == expected, kOp, "the output space's box is ",
                   y.local().shape().str(), ", expected ", expected.str(), " (", out_space.str(),
                   ")");
      // The weight gradient reads the forward pass's im2col matrices rather than rebuilding them.
      if (recording && w.requires_grad()) columns = std::make_shared<kernels::ConvColumns<T>>();
      kernels::conv_forward(xl, wl, b.defined() ? b.value().local() : Tensor<T>(), y.local(), g,
                            columns.get());
    } else {
      DISTOP_CHECK(y.local().numel() == 0, kOp, "this rank holds no box of the input but a box ",
                   y.local().shape().str(), " of the output space ", out_space.str());
    }
    // Inputs: 0 x, 1 w, 2 b (when given).
    auto backward = [g, active, columns](const DistTensor<T>& dy, Gradients<T>& grads) {
      const bool need_x = grads.required(0), need_w = grads.required(1);
      const bool need_b = grads.size() > 2 && grads.required(2);
      // Every rank adds a gradient (possibly empty, or zero) so that whether a Var has one is the
      // same on all ranks, which the adjoints of collective operations upstream rely on.
      if (!active) {
        if (need_w) grads.input(1).grad();
        if (need_b) grads.input(2).grad();
        if (need_x) grads.input(0).grad();
        return;
      }
      // The gradients wanted, computed in one call (the kernels share work between them): each
      // target is the Var's gradient to add to, or a fresh one to overwrite (beta 0).
      kernels::ConvGradients<T> targets;
      auto with = [](bool need, const Var<T>& v, Tensor<T>*& target, T& beta, auto next) {
        if (!need) return next();
        accumulate_grad(v, [&](T given, Tensor<T>& t) {
          target = &t;
          beta = given;
          next();
        });
      };
      const Var<T>& xv = grads.input(0);
      const Var<T>& wv = grads.input(1);
      with(need_w, wv, targets.dw, targets.beta_w, [&] {
        with(need_b, need_b ? grads.input(2) : wv, targets.db, targets.beta_b, [&] {
          with(need_x, xv, targets.dx, targets.beta_x, [&] {
            kernels::conv_backward(dy.local(), xv.value().local(), wv.value().local(), g, targets,
                                   columns.get());
          });
        });
      });
    };
    return Computed{std::move(y), std::move(backward)};
  };
  if (b.defined()) return make_function<T>(tape, "conv", {x, w, b}, compute);
  return make_function<T>(tape, "conv", {x, w}, compute);
}

std::vector<ConvWindow> conv_windows(int dims, const AxisValues& kernel,
                                     const ConvOptions& options) {
  constexpr const char* kOp = "conv_windows";
  DISTOP_CHECK(dims >= 1 && dims <= 3, kOp, "a convolution has 1 to 3 spatial axes, found ", dims);
  const auto d = static_cast<std::size_t>(dims);
  auto pick = [&](const AxisValues& values, const char* name, std::size_t a) {
    const std::vector<std::int64_t>& v = values.values;
    DISTOP_CHECK(v.size() == 1 || v.size() == d, kOp, name, " has ", v.size(),
                 " entries, expected 1 (the same on every axis) or ", dims, " (one per axis)");
    return v.size() == 1 ? v[0] : v[a];
  };
  std::vector<ConvWindow> windows(d);
  for (std::size_t a = 0; a < d; ++a) {
    ConvWindow& w = windows[a];
    w.kernel = pick(kernel, "kernel", a);
    w.stride = pick(options.stride, "stride", a);
    w.padding = pick(options.padding, "padding", a);
    w.dilation = pick(options.dilation, "dilation", a);
    DISTOP_CHECK(w.kernel >= 1 && w.stride >= 1 && w.dilation >= 1 && w.padding >= 0, kOp,
                 "invalid window ", w.str(), " on axis ", a,
                 ": kernel, stride and dilation must be at least 1 and padding at least 0");
  }
  return windows;
}

template <class T>
Conv<T>::Conv(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
              ConvOptions options)
    : Conv(dims, in_channels, out_channels, std::move(kernel), Partition::self(),
           std::move(options)) {}

template <class T>
Conv<T>::Conv(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
              Partition partition, ConvOptions options)
    : dims_(dims),
      in_(in_channels),
      out_(out_channels),
      windows_(conv_windows(dims, kernel, options)),
      partition_(std::move(partition)) {
  DISTOP_CHECK(in_ > 0 && out_ > 0, "Conv", "channel counts must be positive, found in ", in_,
               " and out ", out_);
  std::vector<std::int64_t> k;
  std::int64_t fan_in = in_;
  for (const auto& w : windows_) {
    k.push_back(w.kernel);
    fan_in *= w.kernel;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  DistTensor<T> wt(replicated(partition_, with_leading(out_, in_, k)));
  uniform_init(wt, parameter_seed(options.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(wt), true));
  if (options.bias) {
    DistTensor<T> bt(replicated(partition_, Shape{out_}));
    uniform_init(bt, parameter_seed(options.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(bt), true));
  }
}

template <class T>
Var<T>& Conv<T>::bias() {
  DISTOP_CHECK(has_bias(), "Conv::bias", "the layer was made without a bias");
  return bias_;
}

template <class T>
TensorSpace Conv<T>::output_space(const TensorSpace& in) const {
  const Shape& s = in.global_shape();
  bool ok = s.rank() == dims_ + 2 && s[1] == in_;
  for (int a = 1; ok && a < s.rank(); ++a) ok = in.decomposition().parts(a) == 1;
  DISTOP_CHECK(ok, "Conv", "expected an input of global shape [N, ", in_, ", s_1..s_", dims_,
               "] split along the batch axis only, found ", in.str());
  TensorSpace out = in.with_extent(1, out_);
  for (int a = 0; a < dims_; ++a) {
    const ConvWindow& w = windows_[static_cast<std::size_t>(a)];
    const std::int64_t n = s[2 + a];
    const std::int64_t span = n + 2 * w.padding - w.dilation * (w.kernel - 1) - 1;
    DISTOP_CHECK(span >= 0, "Conv", "the window ", w.str(), " on spatial axis ", a,
                 " is larger than the padded input extent ", n, " of ", in.str());
    out = out.with_extent(2 + a, window_output_extent(n, w));
  }
  return out;
}

template <class T>
Var<T> Conv<T>::forward(Tape& tape, const Var<T>& x) const {
  const trace::Compute span("Conv", this->registered_path());
  const TensorSpace& xs = x.space();
  const TensorSpace ys = output_space(xs);
  detail::check_input_ranks(xs, partition_, false, "Conv");
  const Shape& s = xs.global_shape();
  const auto g = kernels::WindowGeometry::ordinary(
      Shape(std::vector<std::int64_t>(s.begin() + 2, s.end())), windows_);
  return conv(tape, x, weight_, bias_, g, ys);
}

template Var<float> conv(Tape&, const Var<float>&, const Var<float>&, const Var<float>&,
                         const kernels::WindowGeometry&, const TensorSpace&);
template Var<double> conv(Tape&, const Var<double>&, const Var<double>&, const Var<double>&,
                          const kernels::WindowGeometry&, const TensorSpace&);

template class Conv<float>;
template class Conv<double>;

}  // namespace distop::nn
