#pragma once
// DistributedPool<T>: max or average pooling of a spatially (and channel-) partitioned tensor.

#include <map>
#include <memory>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/pool.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/halo_pad.hpp"

namespace distop::nn {

// Pooling with DistDL's scheme: x [N, C, s_1..s_d] split over a partition with one grid axis per
// tensor axis (balanced; any axis may be split, typically the spatial ones and the channels):
//
//   x --HaloExchange--> each rank's block plus the ghost zones its outputs read
//     --local pool-->   y [N, C, m..], balanced over the same partition
//
// The ghost zones hold the neighbours' values; padding is applied only at the domain boundary
// (max pooling ignores it, as if it were -infinity; average pooling counts it as zero, PyTorch's
// count_include_pad = True). The adjoint runs the local pooling's gradient, then the halo
// exchange's adjoint, which adds the ghost gradients into their owners. Plans are built once per
// input space; forward is collective over the input partition's parent.
template <class T>
class DistributedPool : public Module<T> {
 public:
  DistributedPool(PoolKind kind, int dims, AxisValues kernel, PoolOptions options = {});

  PoolKind kind() const noexcept { return kind_; }
  const std::vector<ConvWindow>& windows() const noexcept { return windows_; }
  // The balanced output space on x's partition.
  TensorSpace output_space(const TensorSpace& in) const;
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  struct Plans {
    std::shared_ptr<const HaloPad<T>> pad;        // null with halo
    std::shared_ptr<const HaloExchange<T>> halo;  // null: no spatial axis split
    TensorSpace out_space;
    kernels::WindowGeometry geometry;
  };
  const Plans& plans(const TensorSpace& x_space);

  PoolKind kind_;
  int dims_;
  std::vector<ConvWindow> windows_;
  std::vector<std::pair<TensorSpace, Plans>> plans_;
};

extern template class DistributedPool<float>;
extern template class DistributedPool<double>;

}  // namespace distop::nn
