#pragma once
// Sequence parallelism: attention over a sequence split across ranks, by ring attention (key and
// value blocks travel around the ranks with an online softmax) or by all-to-all (DeepSpeed-Ulysses:
// a Repartition from sequence-split to head-split and back around local attention).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop::nn {

// How attention reaches the keys and values of the other ranks' sequence blocks.
//   ring:     each rank keeps its query block; the key/value blocks pass around the ring of the
//             sequence axis's ranks (P - 1 nonblocking transfers, each overlapped with the block
//             computation), the softmax accumulated online (running maximum and sum); backward
//             replays the ring in reverse, the key/value gradients travelling the other way.
//             Memory per rank O(S/P D) for the blocks and O((S/P)^2) for one head's scores.
//   alltoall: q, k and v are repartitioned from sequence-split to head-split (each rank then holds
//             whole sequences of about H/P heads), attention runs locally, and the output is
//             repartitioned back: four all-to-alls forward and four backward. Memory per rank
//             O(S D H/P) and the scores of its heads over the whole sequence, O(H/P S^2).
enum class SequenceParallelStrategy { ring, alltoall };

// "ring" or "alltoall", and back (an Error naming the accepted names for anything else).
std::string_view to_string(SequenceParallelStrategy strategy);
SequenceParallelStrategy parse_sequence_parallel_strategy(std::string_view name);

// Which tokens each rank of the sequence axis holds.
//   contiguous: rank r holds the r-th of P balanced blocks of positions (as Decomposition::balanced
//               splits S); the tensor's order along S is the positions' order.
//   zigzag:     the positions are cut into 2P balanced chunks and rank r holds chunks r and
//               2P - 1 - r, so that under a causal mask every rank has about the same work. The
//               tensor then holds the tokens in that order along S: its global index i along S is
//               the token at position sequence_positions(S, P, zigzag)[i]. Everything but the
//               causal mask is indifferent to the order of the tokens; a program lays its input out
//               (and its position embeddings) in this order, with sequence_positions.
enum class SequenceLayout { contiguous, zigzag };

// The sequence axis of a layer's input [N, S, E] (or heads [N, H, S, D]) is split over grid axis
// `sequence_axis` of the layer's partition, the blocks as `layout` says, and attention crosses the
// blocks by `strategy`.
struct SequenceParallel {
  int sequence_axis = 0;
  SequenceParallelStrategy strategy = SequenceParallelStrategy::ring;
  SequenceLayout layout = SequenceLayout::contiguous;
};

// The extents of the P blocks of a sequence of `length` tokens under `layout` (P >= 1, length >= P
// for zigzag's 2P chunks to be non-empty where length >= 2P; a chunk may be empty otherwise).
std::vector<std::int64_t> sequence_blocks(std::int64_t length, int parts, SequenceLayout layout);
// The position of the token at each global index along S (the identity for contiguous).
std::vector<std::int64_t> sequence_positions(std::int64_t length, int parts, SequenceLayout layout);

// What a sequence-parallel attention call computes beyond softmax(q k^T scale) v.
struct SequenceAttentionOptions {
  // Query position i attends to key positions j <= i (positions as the layout says).
  bool is_causal = false;
  // Dropout on the attention weights (after the softmax), with masks keyed by the global index
  // [n, h, i, j] of each weight in the tensors' order (as kernels::dropout keys them), so that the
  // masks are those of local attention on the same tensors, whatever the partition.
  double dropout = 0.0;
  std::uint64_t dropout_seed = 0;
  // The scale of the scores; 1 / sqrt(D) when not given.
  std::optional<double> scale = std::nullopt;
};

// Scaled dot-product attention y = softmax(q k^T scale [+ causal mask]) v, per batch entry and
// head, on q, k and v [N, H, S, D] whose sequence axis is split over grid axis sp.sequence_axis of
// their partition (P ranks along it, blocks as sequence_blocks(S, P, sp.layout)); the heads may be
// split over another grid axis (tensor parallelism), the batch too (replicas within the partition),
// D is whole. y lives in q's space. Exact: equal to unsharded attention on the same tensors up to
// float rounding (the ring's online softmax sums in another order).
//
// A plan, built once per space (collective over the partition: every rank constructs it with the
// same arguments), then called any number of times; forward records one operation whose backward
// runs the strategy's adjoint. Every rank of the partition calls forward, in the same order, as
// with any operator. Errors (on every rank): a space that is not [N, H, S, D] with S split over
// the axis as the layout says and D whole; q, k and v of different spaces.
template <class T>
class SequenceParallelAttention {
 public:
  SequenceParallelAttention(const TensorSpace& heads, SequenceParallel sp);
  ~SequenceParallelAttention();
  SequenceParallelAttention(const SequenceParallelAttention&) = delete;
  SequenceParallelAttention& operator=(const SequenceParallelAttention&) = delete;

  const TensorSpace& space() const noexcept;
  const SequenceParallel& sequence_parallel() const noexcept;

  Var<T> forward(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                 const SequenceAttentionOptions& options = {}) const;

 private:
  struct Impl;
  struct RingCall;
  std::shared_ptr<const Impl> impl_;
};

extern template class SequenceParallelAttention<float>;
extern template class SequenceParallelAttention<double>;

#ifdef DISTOP_SMPI
namespace detail {
// SimGrid SMPI builds only (bench_simulated --program attention --compute injected,
// docs/scaling.md): when set, the ring strategy does not compute its blocks of attention but calls
// the hook where each block's computation runs (forward: after the next block's transfer is
// posted, before its wait; backward: after the block's and its gradient's transfers are posted),
// with the block's (n, h) pairs, query rows and key rows, so that a simulation charges it as
// simulated compute; the outputs and gradients are then meaningless (timing only). Null (the
// default): the blocks are computed. Per process, i.e. per simulated rank.
using RingBlockHook = void (*)(std::int64_t pairs, std::int64_t query_rows, std::int64_t key_rows);
void set_ring_block_hook(RingBlockHook hook) noexcept;
}  // namespace detail
#endif

}  // namespace distop::nn
