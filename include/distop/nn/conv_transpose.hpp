#pragma once
// Transposed convolution on the tape: the functional form shared by the local and the distributed
// layers (nn/distributed_conv_transpose.hpp), and the local layer ConvTranspose<T> (torch's
// ConvTranspose1d/2d/3d).
//
// A transposed convolution is the adjoint of a convolution with the same window: the convolution
// from the transposed output (its input, extents m) to the transposed input (its output, extents
// n), whose weight [C_in, C_out, k..] is exactly torch's transposed layout. It therefore runs on
// the convolution's kernels (kernels/conv.hpp) with the roles exchanged:
//   forward           y  = conv_backward_input(x as dy, w) (+ b)
//   input gradient    dx = conv_forward(dy, w)
//   weight gradient   dw = conv_backward_weight(x as dy, dy as x)
//   bias gradient     db = conv_backward_bias(dy)

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/axis_values.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// y = conv_transpose(x, w) + b on every rank's local boxes, where `g` is the geometry of the
// convolution this is the adjoint of: its input is the transposed output, its output the transposed
// input. So x's local box is [N, C, g.out...], w's [C, O, g.kernel...], b's [O] (b may be an
// undefined Var: no bias), and y is made in `out_space`, whose local box must be [N, O, g.in...]:
//   y[n, o, t] = b[o] + sum over c, i, j with t = i g.stride - g.offset + j g.dilation of
//                x[n, c, i] w[c, o, j]    (per spatial axis; t outside [0, g.in) is dropped).
// For a whole tensor g is conv_transpose_geometry's. Purely local, no messages. Recorded when x, w
// or b requires a gradient: dx, dw and db are added to whichever requires one (every rank adds
// one, zero where its boxes are empty, so the gradients exist on all ranks).
template <class T>
Var<T> conv_transpose(Tape& tape, const Var<T>& x, const Var<T>& w, const Var<T>& b,
                      const kernels::WindowGeometry& g, const TensorSpace& out_space);

// Options of a transposed convolution layer (local or distributed), for designated initialisers:
// `{.stride = 2, .padding = 1, .output_padding = 1, .seed = 7}`, in torch's order of
// ConvTranspose2d's arguments. Per-axis values take one entry (the same on every spatial axis) or
// one per axis. output_padding adds outputs at the high end of each axis (torch's rule: it must
// be smaller than the stride or the dilation of its axis).
struct ConvTransposeOptions {
  AxisValues stride = 1;
  AxisValues padding = 0;
  AxisValues output_padding = 0;
  AxisValues dilation = 1;
  bool bias = true;
  // The initial parameters are a function of the seed alone (not of the partitioning); give each
  // layer of a model its own.
  std::uint64_t seed = 0;
};

// The per-axis windows (kernel, stride, padding, dilation) and output paddings of a d-dimensional
// transposed convolution with kernel `kernel` (1 or d entries) and options (1 or d entries each).
// Error on a wrong count, an invalid value, or an output padding that is negative or not smaller
// than either the stride or the dilation of its axis.
struct ConvTransposeWindows {
  std::vector<ConvWindow> windows;
  std::vector<std::int64_t> output_padding;
};
ConvTransposeWindows conv_transpose_windows(int dims, const AxisValues& kernel,
                                            const ConvTransposeOptions& options);

// The output spatial extents (n_a - 1) s - 2 p + d (k - 1) + output_padding + 1 for input spatial
// extents `in`. Error where one is not positive.
Shape conv_transpose_out(const Shape& in, const ConvTransposeWindows& w);

// The geometry of the whole transposed convolution over input spatial extents `in`, for
// conv_transpose: the convolution from conv_transpose_out(in, w) to `in` with offset = padding.
kernels::WindowGeometry conv_transpose_geometry(const Shape& in, const ConvTransposeWindows& w);

// A local transposed convolution layer with d = 1, 2 or 3 spatial axes (torch's
// ConvTranspose1d/2d/3d, groups = 1). Every rank applies it to its own box of the input
// [N, C, s_1..s_d], which may be split along the batch axis only; the output is
// [N, O, m_1..m_d] with m = (s - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
// The weight [C, O, k_1..k_d] (torch's transposed layout) and bias [O] are replicated over
// `partition` (default: this process) and initialised as torch does, uniform in
// [-1/sqrt(fan_in), 1/sqrt(fan_in)] with torch's fan_in of the weight, its second extent times the
// kernel size: O k_1..k_d. Counter-based random numbers (nn::uniform_init), so the values depend on
// the seed alone. Parameters "weight" and "bias", per_replica (each copy's gradient comes from its
// own box).
//
//   // ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1): 14 x 14 -> 28 x 28
//   nn::ConvTranspose<float> up(2, 16, 8, 3, {.stride = 2, .padding = 1, .output_padding = 1});
template <class T>
class ConvTranspose : public Module<T> {
 public:
  ConvTranspose(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
                ConvTransposeOptions options = {});
  ConvTranspose(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
                Partition partition, ConvTransposeOptions options = {});

  int dims() const noexcept { return dims_; }
  std::int64_t in_channels() const noexcept { return in_; }
  std::int64_t out_channels() const noexcept { return out_; }
  const ConvTransposeWindows& windows() const noexcept { return windows_; }
  bool has_bias() const noexcept { return bias_.defined(); }

  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();

  // The output space for an input space: the spatial extents replaced by the transposed output
  // extents, the channel extent by out_channels. Error unless the input is [N, C, s...] with
  // C == in_channels and only the batch axis split.
  TensorSpace output_space(const TensorSpace& in) const;
  Var<T> forward(Tape& tape, const Var<T>& x) const;

 private:
  int dims_;
  std::int64_t in_;
  std::int64_t out_;
  ConvTransposeWindows windows_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
};

extern template class ConvTranspose<float>;
extern template class ConvTranspose<double>;

}  // namespace distop::nn
