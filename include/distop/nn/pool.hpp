#pragma once
// Pooling on the tape: the functional forms shared by the local and distributed layers, and the
// local layers MaxPool<T> and AvgPool<T>.

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/axis_values.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// y = pool(x) on every rank's local boxes (kernels/pool.hpp): x's local box [N, C, g.in...], y
// made in `out_space` whose local box must be [N, C, g.out...]. Purely local. Recorded when x
// requires a gradient.
template <class T>
Var<T> max_pool(Tape& tape, const Var<T>& x, const kernels::WindowGeometry& g,
                const TensorSpace& out_space);
template <class T>
Var<T> avg_pool(Tape& tape, const Var<T>& x, const kernels::WindowGeometry& g,
                const TensorSpace& out_space);

// Options of a pooling layer, per spatial axis (one entry: the same on every axis). An empty
// stride means stride = kernel, as in PyTorch.
struct PoolOptions {
  AxisValues stride{};  // empty: the kernel
  AxisValues padding = 0;
  AxisValues dilation = 1;
};

// The per-axis windows of a d-dimensional pooling. Error on a wrong count or invalid value, and
// (as PyTorch) when a padding exceeds half the kernel.
std::vector<ConvWindow> pool_windows(int dims, const AxisValues& kernel,
                                     const PoolOptions& options);

// Local pooling layers over d = 1, 2 or 3 spatial axes of [N, C, s_1..s_d] (only the batch axis
// may be split): PyTorch's MaxPool{1,2,3}d and AvgPool{1,2,3}d (count_include_pad = True,
// ceil_mode = False).
enum class PoolKind { max, avg };

template <class T>
class Pool : public Module<T> {
 public:
  Pool(PoolKind kind, int dims, AxisValues kernel, PoolOptions options = {});
  PoolKind kind() const noexcept { return kind_; }
  const std::vector<ConvWindow>& windows() const noexcept { return windows_; }
  TensorSpace output_space(const TensorSpace& in) const;
  Var<T> forward(Tape& tape, const Var<T>& x) const;

 private:
  PoolKind kind_;
  std::vector<ConvWindow> windows_;
};

extern template class Pool<float>;
extern template class Pool<double>;

}  // namespace distop::nn
