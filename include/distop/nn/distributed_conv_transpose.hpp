#pragma once
// DistributedConvTranspose<T>: a transposed convolution whose input, output and weight are split
// over a grid of ranks (the feature, channel and general partitions of DistributedConv).

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/kernels/window.hpp"
#include "distop/nn/conv_transpose.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/halo_pad.hpp"
#include "distop/ops/sum_reduce.hpp"

namespace distop::nn {

// A d-dimensional transposed convolution (d = 1, 2, 3; torch's ConvTranspose{1,2,3}d, groups = 1)
// over a weight partition P_w of grid [P_co, P_ci, S_1 .. S_d], structured as DistributedConv:
//
//   x [N, C, s..] on P_x = P_w's ranks with co = 0, grid [1, P_ci, S..]
//                         (channels split P_ci ways, spatial axes split by S, batch whole)
//     --HaloExchange on P_x-->    each rank's block plus the ghost zones its outputs receive from
//                                 (transposed_halo_spec, ops/halo.hpp)
//     --Broadcast P_x -> P_w-->   the padded block of (ci, s) on every rank (co, ci, s)
//     --local conv_transpose-->   z = its balanced block of conv_transpose(x_ci,s, W_ci,co)
//                                 (+ b_co on ranks with ci = 0)
//     --SumReduce P_w -> P_y-->   y_co,s = sum over ci of z                (P_y: ranks with ci = 0)
//   y [N, O, m..] on P_y seen as grid [1, P_co, S..] (output channels split P_co ways, output
//   spatial extents balanced over S, as the halo rule assumes)
//
//   W [C, O, k..] lives once, on the ranks with spatial coordinates 0 (grid [P_co, P_ci, 1..]:
//   its axis 0, the input channels, split P_ci ways, its axis 1, the output channels, P_co ways),
//   and is broadcast along the spatial axes; b [O] lives on the ranks with ci = 0 and spatial
//   coordinates 0 and is broadcast along the spatial axes. Their gradients are sum-reduced back
//   (the broadcasts' adjoints).
//
// Halo rule: output t receives from input i when t = i s - p + j d, so a part computing the
// outputs [t_lo, t_hi) needs the inputs [ceil((t_lo + p - d (k - 1)) / s), floor((t_hi - 1 + p) /
// s)] clipped to [0, n); the local kernel's geometry places the padded block, which starts at
// global input i_lo, with offset t_lo + p - i_lo s. A part that needs input beyond its adjacent
// neighbour is an Error on every rank. Steps that move nothing are skipped, as in DistributedConv.
//
// Parameters are initialised as nn::ConvTranspose's (uniform in +-1/sqrt(O k..) keyed by global
// index), so a DistributedConvTranspose and a ConvTranspose made with the same seed hold the same
// weights. Construction and forward are collective over P_w's parent; ranks outside P_w pass
// through with empty tensors. Plans are built once per input shape. Parameters "weight" [C, O, k..]
// and "bias" [O], per_replica.
//
//   nn::DistributedConvTranspose<float> up(2, 16, 8, 3, Partition::world(Shape{1, 1, 2, 2}),
//                                          {.stride = 2, .padding = 1, .output_padding = 1});
template <class T>
class DistributedConvTranspose : public Module<T> {
 public:
  DistributedConvTranspose(int dims, std::int64_t in_channels, std::int64_t out_channels,
                           AxisValues kernel, const Partition& weight_partition,
                           ConvTransposeOptions options = {});

  int dims() const noexcept { return dims_; }
  std::int64_t in_channels() const noexcept { return in_; }
  std::int64_t out_channels() const noexcept { return out_; }
  const ConvTransposeWindows& windows() const noexcept { return windows_; }
  const Partition& weight_partition() const noexcept { return p_w_; }
  const Partition& input_partition() const noexcept { return p_x_; }
  const Partition& output_partition() const noexcept { return p_out_; }
  // [N, C, s..] on input_partition() and [N, O, m..] on output_partition(), balanced.
  TensorSpace input_space(std::int64_t batch, const Shape& spatial) const;
  TensorSpace output_space(std::int64_t batch, const Shape& spatial) const;

  // [C, O, k..] on the spatial-0 ranks of P_w, split [P_ci, P_co]; [O] on the ci = 0, spatial-0
  // ranks, split P_co ways.
  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();
  bool has_bias() const noexcept { return bias_.defined(); }

  // x must live in input_space(N, s) for some N and s.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  struct Plans {
    std::shared_ptr<const HaloPad<T>> pad;            // made with `halo`
    std::shared_ptr<const HaloExchange<T>> halo;      // null: no part reads a neighbour's input
    std::shared_ptr<const Broadcast<T>> broadcast_x;  // null: P_co == 1
    std::shared_ptr<const SumReduce<T>> reduce_y;     // null: P_ci == 1
    TensorSpace z_space;                              // the local outputs on P_w
    TensorSpace out_space;
    kernels::WindowGeometry geometry;
  };
  const Plans& plans(const TensorSpace& x_space);

  int dims_;
  std::int64_t in_;
  std::int64_t out_;
  ConvTransposeWindows windows_;
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

extern template class DistributedConvTranspose<float>;
extern template class DistributedConvTranspose<double>;

}  // namespace distop::nn
