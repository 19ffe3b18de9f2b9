#pragma once
// DistributedConv<T>: a convolution whose input, output and weight are split over a grid of ranks
// (DistDL's feature, channel and general distributed convolutions, in one layer).

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/conv.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/halo_pad.hpp"
#include "distop/ops/sum_reduce.hpp"

namespace distop::nn {

// A d-dimensional convolution (d = 1, 2, 3; PyTorch's Conv{1,2,3}d, zero padding, groups = 1)
// over a weight partition P_w of grid [P_co, P_ci, S_1 .. S_d]:
//
//   x [N, C, s..] on P_x = P_w's ranks with co = 0, grid [1, P_ci, S..]
//                         (channels split P_ci ways, spatial axes split by S, batch whole)
//     --HaloExchange on P_x-->    each rank's block plus the ghost zones its outputs read
//     --Broadcast P_x -> P_w-->   the padded block of (ci, s) on every rank (co, ci, s)
//     --local conv-->             z = conv(x_ci,s, W_co,ci) (+ b_co on ranks with ci = 0)
//     --SumReduce P_w -> P_y-->   y_co,s = sum over ci of z                (P_y: ranks with ci = 0)
//   y [N, O, m..] on P_y seen as grid [1, P_co, S..] (output channels split P_co ways, output
//   spatial extents balanced over S, as the halo rule assumes)
//
//   W [O, C, k..] lives once, on the ranks with spatial coordinates 0 (grid [P_co, P_ci, 1..]),
//   and is broadcast along the spatial axes; b [O] lives on the ranks with ci = 0 and spatial
//   coordinates 0 and is broadcast along the spatial axes. Their gradients are sum-reduced back
//   (the broadcasts' adjoints).
//
// The three DistDL schemes are the special grids: feature (spatial) partitioning [1, 1, S..]
// (halo exchange, weights broadcast from one rank); channel partitioning [P_co, P_ci, 1..]
// (broadcast input, local conv, sum-reduce; no halo); and the general case with both. Steps that
// move nothing are skipped (the halo exchange when no spatial axis is split, the input broadcast
// when P_co = 1, the sum-reduce when P_ci = 1, the parameter broadcasts when S is one cell).
// Global padding exists only at the domain boundary: inside the domain the ghost zones hold the
// neighbours' values.
//
// Parameters are initialised as nn::Conv's (uniform in +-1/sqrt(C k..) keyed by global index), so
// a DistributedConv and a Conv made with the same seed hold the same weights. Construction and
// forward are collective over P_w's parent; ranks outside P_w pass through with empty tensors.
// Plans are built once per batch size.
//
// Parameters "weight" [O, C, k..] and "bias" [O], as in PyTorch's Conv{1,2,3}d; both
// per_replica (the sum-reduce along the spatial axes, the broadcasts' adjoint, makes each home
// block's gradient the whole replica's).
//
//   nn::DistributedConv<float> conv(2, 1, 6, 5, Partition::world(Shape{1, 1, 2, 2}),
//                                   {.padding = 2, .seed = 1});
template <class T>
class DistributedConv : public Module<T> {
 public:
  DistributedConv(int dims, std::int64_t in_channels, std::int64_t out_channels, AxisValues kernel,
                  const Partition& weight_partition, ConvOptions options = {});

  int dims() const noexcept { return dims_; }
  std::int64_t in_channels() const noexcept { return in_; }
  std::int64_t out_channels() const noexcept { return out_; }
  const std::vector<ConvWindow>& windows() const noexcept { return windows_; }
  const Partition& weight_partition() const noexcept { return p_w_; }
  const Partition& input_partition() const noexcept { return p_x_; }
  const Partition& output_partition() const noexcept { return p_out_; }
  // [N, C, s..] on input_partition() and [N, O, m..] on output_partition(), balanced.
  TensorSpace input_space(std::int64_t batch, const Shape& spatial) const;
  TensorSpace output_space(std::int64_t batch, const Shape& spatial) const;

  // [O, C, k..] on the spatial-0 ranks of P_w, split [P_co, P_ci]; [O] on the ci = 0,
  // spatial-0 ranks, split P_co ways.
  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();
  bool has_bias() const noexcept { return bias_.defined(); }

  // x must live in input_space(N, s) for some N and s.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  struct Plans {
    std::shared_ptr<const HaloPad<T>> pad;            // made with `halo`
    std::shared_ptr<const HaloExchange<T>> halo;      // null: no window crosses a block
    std::shared_ptr<const Broadcast<T>> broadcast_x;  // null: P_co == 1
    std::shared_ptr<const SumReduce<T>> reduce_y;     // null: P_ci == 1
    TensorSpace z_space;                              // the local convs' outputs on P_w
    TensorSpace out_space;
    kernels::WindowGeometry geometry;
  };
  const Plans& plans(const TensorSpace& x_space);

  int dims_;
  std::int64_t in_;
  std::int64_t out_;
  std::vector<ConvWindow> windows_;
  Partition p_w_;
  Partition p_x_;
  Partition p_y_;    // P_w's ranks with ci = 0, grid [P_co, 1, S..]
  Partition p_out_;  // the same ranks as a [1, P_co, S..] grid
  Partition p_wh_;   // the weight's home: spatial coordinates 0, grid [P_co, P_ci, 1..]
  Partition p_bh_;   // the bias' home: ci = 0 and spatial 0, grid [P_co, 1, 1..]
  std::shared_ptr<const Broadcast<T>> broadcast_w_;  // null: S is one cell
  std::shared_ptr<const Broadcast<T>> broadcast_b_;
  std::shared_ptr<const BroadcastPlan> x_plan_;
  std::shared_ptr<const BroadcastPlan> y_plan_;
  Var<T> weight_;
  Var<T> bias_;
  std::map<std::vector<std::int64_t>, Plans> plans_;
};

extern template class DistributedConv<float>;
extern template class DistributedConv<double>;

}  // namespace distop::nn
