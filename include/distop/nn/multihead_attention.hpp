#pragma once
// Multi-head attention (torch.nn.MultiheadAttention with batch_first=True), local: every rank
// attends within the whole sequences of its own box of the batch.

#include <cstdint>
#include <memory>
#include <optional>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// Options of a MultiheadAttention, for designated initialisers: `{.dropout = 0.1, .seed = 3}`.
struct MultiheadAttentionOptions {
  // The probability of dropping an attention weight (after the softmax), in training mode only.
  double dropout = 0.0;
  // The initial parameters and the dropout masks are functions of the seed alone.
  std::uint64_t seed = 0;
};

// What a forward call masks: torch's attn_mask (a float mask [S, S2] added to every head's scores,
// 0 where attended and -inf or a large negative value where not, held whole on every rank that
// holds a box of the input, e.g. on Partition::self) and is_causal (query i attends to keys j <=
// i). Both may be given: the mask is added, then the causal mask applied.
template <class T>
struct AttentionMask {
  std::optional<DistTensor<T>> attn_mask = std::nullopt;
  bool is_causal = false;
};

// torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias=True, batch_first=True) on
// inputs [N, S, E]: q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v (W_q, W_k,
// W_v the rows [0, E), [E, 2E), [2E, 3E) of in_proj_weight), split into H heads of D = E / H;
// per head softmax(q k^T / sqrt(D) + mask) (dropout on it in training), times v; the heads
// concatenated and passed through out_proj. Returns the output [N, S, E] (torch's first result;
// the averaged attention weights are not returned).
//
// Parameters (torch's names and layouts, per_replica, replicated on this process):
// "in_proj_weight" [3E, E] (xavier_uniform_), "in_proj_bias" [3E] (zeros) and the child Linear
// "out_proj" ("out_proj.weight" [E, E], nn.Linear's default, "out_proj.bias" [E], zeros).
//
// Local: the batch axis of the inputs may be split over ranks (each rank holding whole sequences);
// the sequence and feature axes must be whole. forward is composed of the tape's operations
// (Linear, a head split and merge, batched matmul, softmax, dropout), so backward is theirs.
// Errors: E not divisible by H, inputs that are not [N, S, E] with S and E unsplit, key and value
// of other shapes than each other or another batch than the query.
//
//   nn::MultiheadAttention<float> attn(256, 8, {.dropout = 0.1, .seed = 1});
//   auto y = attn.forward(tape, x, {.is_causal = true});
template <class T>
class MultiheadAttention : public Module<T> {
 public:
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                     MultiheadAttentionOptions options = {});

  std::int64_t embed_dim() const noexcept { return embed_dim_; }
  std::int64_t num_heads() const noexcept { return num_heads_; }
  std::int64_t head_dim() const noexcept { return embed_dim_ / num_heads_; }
  const MultiheadAttentionOptions& options() const noexcept { return options_; }

  Var<T>& in_proj_weight() noexcept { return in_proj_.weight(); }
  Var<T>& in_proj_bias() { return in_proj_.bias(); }
  Linear<T>& out_proj() noexcept { return *out_proj_; }

  // Self-attention: query = key = value = x [N, S, E] (one input projection).
  Var<T> forward(Tape& tape, const Var<T>& x, const AttentionMask<T>& mask = {});
  // query [N, S, E], key and value [N, S2, E]. Not to be called on one module from several threads
  // at once (it counts the calls that draw dropout masks).
  Var<T> forward(Tape& tape, const Var<T>& query, const Var<T>& key, const Var<T>& value,
                 const AttentionMask<T>& mask = {});

 private:
  std::int64_t embed_dim_;
  std::int64_t num_heads_;
  MultiheadAttentionOptions options_;
  Linear<T> in_proj_;  // not a child: its parameters are registered as in_proj_weight/in_proj_bias
  std::shared_ptr<Linear<T>> out_proj_;
  std::shared_ptr<std::int64_t> calls_;  // training calls so far (the dropout masks' counter)

  Var<T> attend(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                const AttentionMask<T>& mask);
};

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;

}  // namespace distop::nn
