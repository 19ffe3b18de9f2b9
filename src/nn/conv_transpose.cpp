#include "distop/nn/conv_transpose.hpp"

#include <cmath>
#include <utility>

#include "common.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/conv.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/nn/conv.hpp"
#include "distop/nn/init.hpp"
#include "distop/ops/halo.hpp"

namespace distop::nn {

namespace {

// [a, b, extents...]
Shape with_leading(std::int64_t a, std::int64_t b, const Shape& extents) {
  std::vector<std::int64_t> e{a, b};
  e.insert(e.end(), extents.begin(), extents.end());
  return Shape(std::move(e));
}

}  // namespace

template <class T>
Var<T> conv_transpose(Tape& tape, const Var<T>& x, const Var<T>& w, const Var<T>& b,
                      const kernels::WindowGeometry& g, const TensorSpace& out_space) {
  constexpr const char* kOp = "nn::conv_transpose";
  DISTOP_CHECK(x.defined() && w.defined(), kOp, "x and w must be defined Vars");
  // Whether this rank holds a box of the input (and so computes); a rank outside the partition
  // has no window.
  const bool active = x.space().partition().active();
  auto compute = [&] {
    auto y = DistTensor<T>::uninitialized(out_space);
    if (active) {
      g.validate(kOp);
      const Tensor<T>& xl = x.value().local();
      const Tensor<T>& wl = w.value().local();
      DISTOP_CHECK(xl.rank() == g.dims() + 2 && wl.rank() == g.dims() + 2, kOp,
                   "expected x's box [N, C, in...] and w's [C, O, k...] with ", g.dims(),
                   " spatial axes, found x ", xl.shape().str(), " and w ", wl.shape().str());
      const Shape expected = with_leading(xl.extent(0), wl.extent(1), g.in);
      DISTOP_CHECK(y.local().shape() == expected, kOp, "the output space's box is ",
                   y.local().shape().str(), ", expected ", expected.str(), " (", out_space.str(),
                   ")");
      // The adjoint of x -> conv(x, w) with the convolution's input the transposed output: the
      // kernel checks x against [N, C, g.out...] and w against [C, O, g.kernel...].
      kernels::conv_backward_input(xl, wl, T(0), y.local(), g);
      if (b.defined()) {
        const Tensor<T>& bl = b.value().local();
        DISTOP_CHECK(bl.shape() == Shape{wl.extent(1)}, kOp, "the bias' box is ", bl.shape().str(),
                     ", expected [", wl.extent(1), "] (one per output channel)");
        // b as [O, 1, .., 1], broadcast over the batch and the spatial axes.
        std::vector<std::int64_t> column{wl.extent(1)};
        column.resize(static_cast<std::size_t>(g.dims()) + 1, 1);
        kernels::add(y.local(), T(1), bl.reshaped(Shape(column)), y.local());
      }
    } else {
      DISTOP_CHECK(y.local().numel() == 0, kOp, "this rank holds no box of the input but a box ",
                   y.local().shape().str(), " of the output space ", out_space.str());
    }
    // Inputs: 0 x, 1 w, 2 b (when given).
    auto backward = [g, active](const DistTensor<T>& dy, Gradients<T>& grads) {
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
      const Tensor<T>& dyl = dy.local();
      const Tensor<T>& xl = grads.input(0).value().local();
      const Tensor<T>& wl = grads.input(1).value().local();
      // dx = conv(dy, w). Its im2col matrices of dy are those the weight gradient reads (dy is
      // the convolution's input there), so they are kept for it.
      kernels::ConvColumns<T> columns;
      kernels::ConvColumns<T>* keep = need_w ? &columns : nullptr;
      if (need_x) {
        grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
          if (beta == T(0)) {
            kernels::conv_forward(dyl, wl, Tensor<T>(), dx, g, keep);
          } else {
            Tensor<T> fresh(dx.shape());
            kernels::conv_forward(dyl, wl, Tensor<T>(), fresh, g, keep);
            kernels::axpy(T(1), fresh, dx);
          }
        });
      }
      // dw = conv^T_w(x as the convolution's output gradient, dy as its input).
      if (need_w) {
        grads.accumulate(1, [&](T beta, Tensor<T>& dw) {
          kernels::conv_backward_weight(xl, dyl, beta, dw, g, columns.empty() ? nullptr : &columns);
        });
      }
      if (need_b) {
        grads.accumulate(
            2, [&](T beta, Tensor<T>& db) { kernels::conv_backward_bias(dyl, beta, db); });
      }
    };
    return Computed{std::move(y), std::move(backward)};
  };
  if (b.defined()) return make_function<T>(tape, "conv_transpose", {x, w, b}, compute);
  return make_function<T>(tape, "conv_transpose", {x, w}, compute);
}

ConvTransposeWindows conv_transpose_windows(int dims, const AxisValues& kernel,
                                            const ConvTransposeOptions& options) {
  constexpr const char* kOp = "conv_transpose_windows";
  ConvTransposeWindows t;
  t.windows = conv_windows(dims, kernel,
                           ConvOptions{.stride = options.stride,
                                       .padding = options.padding,
                                       .dilation = options.dilation,
                                       .bias = options.bias,
                                       .seed = options.seed});
  const auto d = static_cast<std::size_t>(dims);
  const std::vector<std::int64_t>& op = options.output_padding.values;
  DISTOP_CHECK(op.size() == 1 || op.size() == d, kOp, "output_padding has ", op.size(),
               " entries, expected 1 (the same on every axis) or ", dims, " (one per axis)");
  for (std::size_t a = 0; a < d; ++a) {
    const std::int64_t q = op.size() == 1 ? op[0] : op[a];
    const ConvWindow& w = t.windows[a];
    DISTOP_CHECK(q >= 0 && (q < w.stride || q < w.dilation), kOp, "output_padding ", q, " on axis ",
                 a, " with the window ", w.str(),
                 ": it must be at least 0 and smaller than either the stride or the dilation");
    t.output_padding.push_back(q);
  }
  return t;
}

Shape conv_transpose_out(const Shape& in, const ConvTransposeWindows& w) {
  DISTOP_CHECK(static_cast<std::size_t>(in.rank()) == w.windows.size() &&
                   w.output_padding.size() == w.windows.size(),
               "conv_transpose_out", "input spatial extents ", in.str(), " for ", w.windows.size(),
               " windows and ", w.output_padding.size(), " output paddings");
  std::vector<std::int64_t> out;
  for (int a = 0; a < in.rank(); ++a) {
    const auto u = static_cast<std::size_t>(a);
    out.push_back(transposed_output_extent(in[a], w.windows[u], w.output_padding[u]));
  }
  return Shape(std::move(out));
}

kernels::WindowGeometry conv_transpose_geometry(const Shape& in, const ConvTransposeWindows& w) {
  kernels::WindowGeometry g;
  g.in = conv_transpose_out(in, w);
  g.out = in;
  for (const ConvWindow& cw : w.windows) {
    g.kernel.push_back(cw.kernel);
    g.stride.push_back(cw.stride);
    g.dilation.push_back(cw.dilation);
    g.offset.push_back(cw.padding);
  }
  return g;
}

template <class T>
ConvTranspose<T>::ConvTranspose(int dims, std::int64_t in_channels, std::int64_t out_channels,
                                AxisValues kernel, ConvTransposeOptions options)
    : ConvTranspose(dims, in_channels, out_channels, std::move(kernel), Partition::self(),
                    std::move(options)) {}

template <class T>
ConvTranspose<T>::ConvTranspose(int dims, std::int64_t in_channels, std::int64_t out_channels,
                                AxisValues kernel, Partition partition,
                                ConvTransposeOptions options)
    : dims_(dims),
      in_(in_channels),
      out_(out_channels),
      windows_(conv_transpose_windows(dims, kernel, options)),
      partition_(std::move(partition)) {
  DISTOP_CHECK(in_ > 0 && out_ > 0, "ConvTranspose", "channel counts must be positive, found in ",
               in_, " and out ", out_);
  std::vector<std::int64_t> k;
  // torch's fan_in of a weight [C, O, k..]: its second extent times the kernel size.
  std::int64_t fan_in = out_;
  for (const auto& w : windows_.windows) {
    k.push_back(w.kernel);
    fan_in *= w.kernel;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  DistTensor<T> wt(detail::replicated(partition_, with_leading(in_, out_, Shape(k))));
  uniform_init(wt, parameter_seed(options.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(wt), true));
  if (options.bias) {
    DistTensor<T> bt(detail::replicated(partition_, Shape{out_}));
    uniform_init(bt, parameter_seed(options.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(bt), true));
  }
}

template <class T>
Var<T>& ConvTranspose<T>::bias() {
  DISTOP_CHECK(has_bias(), "ConvTranspose::bias", "the layer was made without a bias");
  return bias_;
}

template <class T>
TensorSpace ConvTranspose<T>::output_space(const TensorSpace& in) const {
  const Shape& s = in.global_shape();
  bool ok = s.rank() == dims_ + 2 && s[1] == in_;
  for (int a = 1; ok && a < s.rank(); ++a) ok = in.decomposition().parts(a) == 1;
  DISTOP_CHECK(ok, "ConvTranspose", "expected an input of global shape [N, ", in_, ", s_1..s_",
               dims_, "] split along the batch axis only, found ", in.str());
  Shape out;
  try {
    out = conv_transpose_out(Shape(std::vector<std::int64_t>(s.begin() + 2, s.end())), windows_);
  } catch (const Error& e) {
    throw Error("ConvTranspose", distop::detail::concat("input ", in.str(), ": ", e.detail()));
  }
  TensorSpace result = in.with_extent(1, out_);
  for (int a = 0; a < dims_; ++a) result = result.with_extent(2 + a, out[a]);
  return result;
}

template <class T>
Var<T> ConvTranspose<T>::forward(Tape& tape, const Var<T>& x) const {
  const trace::Compute span("ConvTranspose", this->registered_path());
  const TensorSpace& xs = x.space();
  const TensorSpace ys = output_space(xs);
  detail::check_input_ranks(xs, partition_, false, "ConvTranspose");
  const Shape& s = xs.global_shape();
  const auto g =
      conv_transpose_geometry(Shape(std::vector<std::int64_t>(s.begin() + 2, s.end())), windows_);
  return conv_transpose(tape, x, weight_, bias_, g, ys);
}

template Var<float> conv_transpose(Tape&, const Var<float>&, const Var<float>&, const Var<float>&,
                                   const kernels::WindowGeometry&, const TensorSpace&);
template Var<double> conv_transpose(Tape&, const Var<double>&, const Var<double>&,
                                    const Var<double>&, const kernels::WindowGeometry&,
                                    const TensorSpace&);

template class ConvTranspose<float>;
template class ConvTranspose<double>;

}  // namespace distop::nn
