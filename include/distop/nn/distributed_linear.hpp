#pragma once
// DistributedLinear<T>: a linear layer whose weight is split over a 2-D grid of ranks.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/module.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/sum_reduce.hpp"

namespace distop::nn {

// y = x W^T + b with DistDL's scheme, over a weight partition P_w of grid [P_out, P_in]:
//
//   x [B, in] on P_x = row 0 of P_w as a [1, P_in] grid (features split P_in ways)
//     --Broadcast P_x -> P_w-->   x_j on every rank (i, j)               (copies down the columns)
//     --local GEMM-->             z_ij = x_j W_ij^T, [B, out_i]           (W_ij: block (i, j) of W)
//     --SumReduce P_w -> column 0 of P_w-->  y_i = sum_j z_ij            (sums along the rows)
//     --+ b_i-->                  y [B, out] on P_y = column 0 of P_w as a [1, P_out] grid
//
// The bias lives once, on P_y. Backward runs the adjoints in reverse: Broadcast of dy along the
// rows, the two local GEMMs (dW_ij = dz_ij^T x_j, dx_j = dz_ij W_ij), SumReduce of dx down the
// columns. Layers chain when one layer's P_y is the next one's P_x: place the next layer's grid
// transposed (its row 0 is this layer's column 0).
//
// Construction and forward are collective over P_w's parent (ranks outside P_w pass through with
// empty tensors). The communication plans are built once; a new batch size only derives new
// tensor spaces from them, without messages.
//
// Parameters "weight" [out, in] (each rank of P_w holds its block) and "bias" [out] (on P_y), as
// in PyTorch's nn.Linear; both per_replica. Initialised as Linear with the same seed is, entry
// for entry.
//
//   nn::DistributedLinear<float> fc(784, 256, Partition::world(Shape{2, 2}), {.seed = 1});
template <class T>
class DistributedLinear : public Module<T> {
 public:
  DistributedLinear(std::int64_t in_features, std::int64_t out_features,
                    const Partition& weight_partition, LinearOptions options = {});

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  const Partition& weight_partition() const noexcept { return p_w_; }
  const Partition& input_partition() const noexcept { return p_x_; }
  const Partition& output_partition() const noexcept { return p_y_; }
  // [batch, in] on P_x and [batch, out] on P_y, features split, batch whole.
  TensorSpace input_space(std::int64_t batch) const;
  TensorSpace output_space(std::int64_t batch) const;

  // [out, in] on P_w, both axes split; [out] on P_y.
  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias() noexcept { return bias_; }
  bool has_bias() const noexcept { return has_bias_; }

  // x must live in input_space(batch) for some batch.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  struct Plans {
    std::shared_ptr<const Broadcast<T>> broadcast_x;
    std::shared_ptr<const SumReduce<T>> reduce_y;
    TensorSpace column_space;  // y on column 0 of P_w, before it is seen as living on P_y
    TensorSpace output_space;
  };
  const Plans& plans(std::int64_t batch);

  std::int64_t in_;
  std::int64_t out_;
  bool has_bias_;
  Partition p_w_;
  Partition p_x_;
  Partition p_col_;
  Partition p_y_;
  std::shared_ptr<const BroadcastPlan> x_plan_;
  std::shared_ptr<const BroadcastPlan> y_plan_;
  Var<T> weight_;
  Var<T> bias_;
  std::map<std::int64_t, Plans> plans_;
};

extern template class DistributedLinear<float>;
extern template class DistributedLinear<double>;

}  // namespace distop::nn
