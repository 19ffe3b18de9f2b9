#pragma once
// Tensor parallelism (Megatron-LM): attention heads and MLP hidden units split over a grid axis,
// with one all-reduce forward and one backward per block.

#include <cstdint>
#include <memory>
#include <optional>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/layer_norm.hpp"
#include "distop/nn/module.hpp"
#include "distop/nn/multihead_attention.hpp"
#include "distop/nn/sequence_parallel.hpp"
#include "distop/ops/all_sum_reduce.hpp"

namespace distop::nn {

// Tied tensors. Between the blocks of a tensor-parallel model every rank of a tensor-parallel
// group (the ranks along the grid axis `tensor_axis` of the layer's partition, T of them) holds
// the same value: the input [N, S, E] is whole on each (replicated along that axis; the batch may
// be split over the other grid axes, data-parallel replicas) and equal on each. A tied tensor is
// one value, the canonical copy s (the rank at coordinate 0 along the axis) broadcast, B s, and
// the gradient a tied tensor receives is the gradient with respect to that one value, the same on
// every rank of the group (Megatron's convention). Inside a block each rank holds its own part
// (its heads, its hidden units): there the sum convention holds, each rank's partial result its
// own component.
//
// Megatron's two operators are Broadcast and its adjoint in this picture (docs/adjoints.md):
//   f = tensor_parallel_copy:   forward y = x (B, realised without a message: every rank already
//                               holds the value); backward dx = A dy, the AllSumReduce of the
//                               group (B* = SumReduce onto the canonical copy, kept tied).
//   g = tensor_parallel_reduce: forward y = A z, the AllSumReduce of the partial results
//                               (SumReduce, kept tied); backward dz = dy (its adjoint B, realised
//                               without a message: the tied gradient is already on every rank).
// So f and g are each other's adjoints, and a block f -> local work -> g moves exactly one
// all-reduce forward (g) and one backward (f's adjoint; none when its input needs no gradient).
// Both take the AllSumReduce A over the group (its domain the tensor's space, replicated along
// the axis), built once by the layer; the tape replays them in reverse order on every rank.
//
// The caller keeps tied tensors tied: the same input on every rank of a group, the same output
// gradient (a loss computed alike on every rank of the group). The layers check that the input
// lives on their partition, replicated along the axis, not that the copies are equal.
template <class T>
Var<T> tensor_parallel_copy(Tape& tape, const Var<T>& x,
                            const std::shared_ptr<const AllSumReduce<T>>& group_sum);
template <class T>
Var<T> tensor_parallel_reduce(Tape& tape, const Var<T>& z,
                              const std::shared_ptr<const AllSumReduce<T>>& group_sum);

// Options of a ColumnParallelLinear or RowParallelLinear, for designated initialisers.
struct ParallelLinearOptions {
  int tensor_axis = 0;  // the grid axis of the partition that splits the weight
  bool bias = true;
  std::uint64_t seed = 0;  // as LinearOptions::seed: the same values as Linear with this seed
  // The grid axis over which the input's rows (a sample's tokens: sequence parallelism) are split
  // while the parameters are replicated along it, or -1. The copies along it are one parameter:
  // forward applies f over the axis to the weight and bias, so that every copy receives the whole
  // gradient (one all-reduce per parameter in backward), not its own rows' part.
  int sequence_axis = -1;
};

// Megatron's column-parallel linear layer, y = x W^T + b with W [out, in] split by rows (output
// features) over the grid axis `tensor_axis` of `partition` (T ranks along it; T must divide
// out): x [M, in] is tied (on `partition`, replicated along the axis, rows split any way over the
// other axes); forward applies f (tensor_parallel_copy) and each rank's rows of W, giving y
// [M, out] with its feature axis split over the axis (no message forward; one all-reduce of dx
// backward). Parameters "weight" [out, in] (rows split) and "bias" [out] (split), per_replica,
// initialised as Linear with the same seed, entry for entry.
template <class T>
class ColumnParallelLinear : public Module<T> {
 public:
  ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features, Partition partition,
                       ParallelLinearOptions options = {});
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  const Partition& partition() const noexcept { return partition_; }
  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::int64_t in_;
  std::int64_t out_;
  Partition partition_;
  ParallelLinearOptions options_;
  Var<T> weight_;
  Var<T> bias_;
  std::shared_ptr<const AllSumReduce<T>> group_sum_;
  std::shared_ptr<const AllSumReduce<T>> weight_tie_, bias_tie_;  // over options.sequence_axis
};

// Megatron's row-parallel linear layer: W [out, in] split by columns (input features) over the
// axis (T must divide in); x [M, in] has its feature axis split over the axis (a
// ColumnParallelLinear's output, or attention's heads); each rank multiplies its columns, g
// (tensor_parallel_reduce) sums the partial products into a tied y [M, out], and the bias is
// added once, to the sum. Parameters "weight" [out, in] (columns split) and "bias" [out] (whole
// on every rank of the partition: a tied parameter of the group, whose gradient every copy holds
// whole), per_replica, initialised as Linear with the same seed.
template <class T>
class RowParallelLinear : public Module<T> {
 public:
  RowParallelLinear(std::int64_t in_features, std::int64_t out_features, Partition partition,
                    ParallelLinearOptions options = {});
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  const Partition& partition() const noexcept { return partition_; }
  Var<T>& weight() noexcept { return weight_; }
  Var<T>& bias();
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::int64_t in_;
  std::int64_t out_;
  Partition partition_;
  ParallelLinearOptions options_;
  Var<T> weight_;
  Var<T> bias_;
  std::shared_ptr<const AllSumReduce<T>> group_sum_;
  std::shared_ptr<const AllSumReduce<T>> weight_tie_, bias_tie_;  // over options.sequence_axis
};

// Options of a TensorParallelMultiheadAttention.
struct TensorParallelMultiheadAttentionOptions {
  int tensor_axis = 0;     // the grid axis of the partition that splits the heads
  double dropout = 0.0;    // on the attention weights, in training (as MultiheadAttention's)
  std::uint64_t seed = 0;  // the same parameters and dropout masks as MultiheadAttention's
  // Sequence parallelism: the input's sequence axis split over grid axis
  // sequence_parallel->sequence_axis (nn/sequence_parallel.hpp), attention crossing the blocks by
  // its strategy. Unset: the sequence is whole on every rank.
  std::optional<SequenceParallel> sequence_parallel = std::nullopt;
};

// torch.nn.MultiheadAttention (batch_first=True, self-attention) with its H heads split over the
// grid axis `tensor_axis` of `partition` (T ranks along it, T dividing H): rank t computes heads
// [t H/T, (t+1) H/T).
//
//   x [N, S, E] tied --f--> q, k, v of its heads (its rows of in_proj_weight, column-parallel)
//     --> attention of its heads (masks and dropout as MultiheadAttention's) --> its heads' rows
//     [N S, E/T] --out_proj (RowParallelLinear: its columns of out_proj.weight, g, + bias)--> y
//
// y [N, S, E] is tied, in x's space. One all-reduce forward, one backward. Equal, in exact
// arithmetic, to MultiheadAttention with the same seed and mask on the same input, for any T; the
// dropout masks too (they are keyed by the global index [n, h, i, j] of each weight).
//
// With options.sequence_parallel, x's sequence axis is split over that grid axis (its blocks as
// the layout says: sequence_blocks; the batch whole), each rank projecting its own tokens, and the
// attention of its heads runs as SequenceParallelAttention (ring or all-to-all) across the ranks
// of the sequence axis; T and the sequence split combine (heads over one axis, tokens over
// another). is_causal applies by position; an additive attn_mask is an Error there. The
// parameters' copies along the sequence axis are tied (f over it on each use), so every copy
// receives the whole gradient, as the copies along the tensor axis of a tied parameter do.
//
// Parameters, torch's names and state_dict shapes: "in_proj_weight" [3E, E], "in_proj_bias" [3E],
// "out_proj.weight" [E, E] (columns split: rank t holds the columns of its heads, torch's layout),
// "out_proj.bias" [E] (whole on every rank). The rows of in_proj_weight a rank needs (its heads'
// q, k and v rows, torch rows [tE/T, (t+1)E/T) + {0, E, 2E}) are three blocks, not one box of
// [3E, E]; so in_proj_weight is held as [3, E, E] (in_proj_bias as [3, E]), the same entries in
// torch's order, split over the tensor axis along its second axis, and the state_dict shows it as
// torch's [3E, E] (NamedParameter::state_shape): its state_dict is torch's at every T, and loads
// into MultiheadAttention, into torch, or into a layer of another T. Initialised as
// MultiheadAttention is with the same seed, each entry from its torch index.
template <class T>
class TensorParallelMultiheadAttention : public Module<T> {
 public:
  TensorParallelMultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                                   Partition partition,
                                   TensorParallelMultiheadAttentionOptions options = {});

  std::int64_t embed_dim() const noexcept { return embed_dim_; }
  std::int64_t num_heads() const noexcept { return num_heads_; }
  std::int64_t head_dim() const noexcept { return embed_dim_ / num_heads_; }
  const Partition& partition() const noexcept { return partition_; }
  int tensor_axis() const noexcept { return options_.tensor_axis; }

  Var<T>& in_proj_weight() noexcept { return in_proj_weight_; }
  Var<T>& in_proj_bias() noexcept { return in_proj_bias_; }
  RowParallelLinear<T>& out_proj() noexcept { return *out_proj_; }

  // Self-attention on a tied x [N, S, E]; `mask` as MultiheadAttention's (an attn_mask [S, S]
  // held whole on every rank of the partition).
  Var<T> forward(Tape& tape, const Var<T>& x, const AttentionMask<T>& mask = {});

 private:
  std::int64_t embed_dim_;
  std::int64_t num_heads_;
  Partition partition_;
  TensorParallelMultiheadAttentionOptions options_;
  Var<T> in_proj_weight_;
  Var<T> in_proj_bias_;
  std::shared_ptr<RowParallelLinear<T>> out_proj_;
  std::shared_ptr<std::int64_t> calls_;  // training calls so far (the dropout masks' counter)
  std::shared_ptr<const AllSumReduce<T>> group_sum_;
  TensorSpace in_proj_rows_, in_proj_bias_rows_;  // in_proj's boxes as [3E, E] rows and [3E]
  std::shared_ptr<const AllSumReduce<T>> weight_tie_, bias_tie_;   // over the sequence axis
  std::shared_ptr<const SequenceParallelAttention<T>> attention_;  // with sequence parallelism
};

// Options of a TensorParallelMLP.
struct TensorParallelMLPOptions {
  int tensor_axis = 0;
  GeluApproximate approximate = GeluApproximate::none;
  std::uint64_t seed = 0;  // linear1 is seeded parameter_seed(seed, "linear1"), linear2 likewise
  int sequence_axis = -1;  // ParallelLinearOptions::sequence_axis of both layers
};

// The transformer MLP, linear2(gelu(linear1(x))), with its hidden units split over the axis (T
// dividing hidden): "linear1" a ColumnParallelLinear [hidden, embed] (f, then its rows), GELU on
// each rank's hidden units, "linear2" a RowParallelLinear [embed, hidden] (its columns, then g,
// then the bias once). x tied, [M, E] or [N, S, E] (E unsplit; S split only with N whole, as
// sequence parallelism splits it); y tied, in x's space. One
// all-reduce forward, one backward. Equal to Linear(E, F) -> gelu -> Linear(F, E) seeded
// parameter_seed(seed, "linear1") and parameter_seed(seed, "linear2").
template <class T>
class TensorParallelMLP : public Module<T> {
 public:
  TensorParallelMLP(std::int64_t embed_dim, std::int64_t hidden, Partition partition,
                    TensorParallelMLPOptions options = {});
  ColumnParallelLinear<T>& linear1() noexcept { return *linear1_; }
  RowParallelLinear<T>& linear2() noexcept { return *linear2_; }
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  TensorParallelMLPOptions options_;
  std::shared_ptr<ColumnParallelLinear<T>> linear1_;
  std::shared_ptr<RowParallelLinear<T>> linear2_;
};

// Options of a TensorParallelTransformerEncoderLayer (TransformerEncoderLayerOptions plus the
// axis).
struct TensorParallelTransformerEncoderLayerOptions {
  int tensor_axis = 0;
  double dropout = 0.1;
  double layer_norm_eps = 1e-5;
  GeluApproximate approximate = GeluApproximate::none;
  std::uint64_t seed = 0;
  // Sequence parallelism of the whole block (TensorParallelMultiheadAttentionOptions's): every
  // other part of the block works token by token, on each rank's own tokens.
  std::optional<SequenceParallel> sequence_parallel = std::nullopt;
};

// TransformerEncoderLayer (pre-norm, GELU) with tensor-parallel attention and MLP:
//   x = x + dropout1(self_attn(norm1(x)))
//   x = x + dropout2(linear2(dropout(gelu(linear1(norm2(x))))))
// on a tied x [N, S, d_model]: the norms (LayerNorms on the partition, a copy of their weight and
// bias on each rank, each receiving the whole gradient), residual adds and dropout1/2 run alike on
// every rank of a group (tied), self_attn is a TensorParallelMultiheadAttention, linear1/linear2
// are column- and row-parallel, "dropout" acts on each rank's hidden units (masks keyed by global
// index). Two all-reduces forward, two backward. Children in torch's order and names (self_attn,
// linear1, dropout, linear2, norm1, norm2, dropout1, dropout2) and seeds as
// TransformerEncoderLayer's, so that with the same seed both hold the same parameters and the same
// state_dict.
template <class T>
class TensorParallelTransformerEncoderLayer : public Module<T> {
 public:
  TensorParallelTransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                        std::int64_t dim_feedforward, Partition partition,
                                        TensorParallelTransformerEncoderLayerOptions options = {});
  TensorParallelMultiheadAttention<T>& self_attn() noexcept { return *self_attn_; }
  ColumnParallelLinear<T>& linear1() noexcept { return *linear1_; }
  RowParallelLinear<T>& linear2() noexcept { return *linear2_; }
  LayerNorm<T>& norm1() noexcept { return *norm1_; }
  LayerNorm<T>& norm2() noexcept { return *norm2_; }
  Var<T> forward(Tape& tape, const Var<T>& x, const AttentionMask<T>& mask = {});

 private:
  TensorParallelTransformerEncoderLayerOptions options_;
  std::shared_ptr<TensorParallelMultiheadAttention<T>> self_attn_;
  std::shared_ptr<ColumnParallelLinear<T>> linear1_;
  std::shared_ptr<Dropout<T>> dropout_;
  std::shared_ptr<RowParallelLinear<T>> linear2_;
  std::shared_ptr<LayerNorm<T>> norm1_;
  std::shared_ptr<LayerNorm<T>> norm2_;
  std::shared_ptr<Dropout<T>> dropout1_;
  std::shared_ptr<Dropout<T>> dropout2_;
};

#define DISTOP_TP_EXTERN(T)                                  \
  extern template class ColumnParallelLinear<T>;             \
  extern template class RowParallelLinear<T>;                \
  extern template class TensorParallelMultiheadAttention<T>; \
  extern template class TensorParallelMLP<T>;                \
  extern template class TensorParallelTransformerEncoderLayer<T>;
DISTOP_TP_EXTERN(float)
DISTOP_TP_EXTERN(double)
#undef DISTOP_TP_EXTERN

}  // namespace distop::nn
