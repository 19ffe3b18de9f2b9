#pragma once
// Convolution on the tape: the functional form shared by the local and the distributed layers,
// and the local layer Conv<T>.

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/axis_values.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// y = conv(x, w) + b on every rank's local boxes (kernels/conv.hpp): x's local box is
// [N, C, g.in...], w's [O, C, g.kernel...], b's [O] (b may be an undefined Var: no bias), and y is
// made in `out_space` whose local box must be [N, O, g.out...]. Purely local, no messages.
// Recorded when x, w or b requires a gradient: dx, dw and db are added to whichever requires one
// (every rank adds one, zero where its boxes are empty, so the gradients exist on all ranks).
template <class T>
Var<T> conv(Tape& tape, const Var<T>& x, const Var<T>& w, const Var<T>& b,
            const kernels::WindowGeometry& g, const TensorSpace& out_space);

// Options of a convolution layer (local or distributed), for designated initialisers:
// `{.stride = 2, .padding = 1, .seed = 7}`. Per-axis values take one entry (the same on every
// spatial axis) or one per axis.
struct ConvOptions {
  AxisValues stride = 1;
  AxisValues padding = 0;
  AxisValues dilation = 1;
  bool bias = true;
  // The initial parameters are a function of the seed alone (not of the partitioning); give each
  // layer of a model its own.
  std::uint64_t seed = 0;
};

// The per-axis windows of a d-dimensional convolution with kernel `kernel` (1 or d entries) and
// options (1 or d entries each). Error on a wrong count or an invalid value.
std::vector<ConvWindow> conv_windows(int dims, const AxisValues& kernel,
                                     const ConvOptions& options);

// A local convolution layer with d = 1, 2 or 3 spatial axes (PyTorch's Conv1d/2d/3d, zero
// padding, groups = 1). Every rank applies it to its own box of the input [N, C, s_1..s_d], which
// may be split along the batch axis only. The weight [O, C, k_1..k_d] and bias [O] are replicated
// over `partition` (default: this process) and initialised as PyTorch does, uniform in
// [-1/sqrt(fan_in), 1/sqrt(fan_in)] with fan_in = C k_1..k_d, from counter-based random numbers
// (nn::uniform_init), so the values depend on the seed alone. Parameters "weight" and "bias",
// per_replica (each copy's gradient comes from its own box).
//
//   nn::Conv<float> conv(2, 1, 6, 5, {.padding = 2, .seed = 1});   // Conv2d(1, 6, 5, padding=2)
template <class T>
class Conv : public Module<T> {
 public:
  Conv(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
       ConvOptions options = {});
  Conv(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
       Partition partition, ConvOptions options = {});

  int dims() const noexcept { return dims_; }
  std::int64_t in_channels() const noexcept { return in_; }
  std::int64_t out_channels() const noexcept { return out_; }
  const std::vector<ConvWindow>& windows() const noexcept { return windows_; }
  bool has_bias() const noexcept { return bias_.defined(); }

  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();

  // The output space for an input space: the spatial extents replaced by the window output
  // extents, the channel extent by out_channels. Error unless the input is [N, C, s...] with
  // C == in_channels and only the batch axis split.
  TensorSpace output_space(const TensorSpace& in) const;
  Var<T> forward(Tape& tape, const Var<T>& x) const;

 private:
  int dims_;
  std::int64_t in_;
  std::int64_t out_;
  std::vector<ConvWindow> windows_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
};

extern template class Conv<float>;
extern template class Conv<double>;

}  // namespace distop::nn
