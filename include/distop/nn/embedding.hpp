#pragma once
// Embedding<T>: a lookup table of vectors picked by integer indices (torch.nn.Embedding), also
// with its rows split across ranks (Megatron's vocabulary-parallel embedding).

#include <cstdint>
#include <memory>
#include <optional>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/nn/module.hpp"
#include "distop/ops/all_sum_reduce.hpp"

namespace distop::nn {

struct EmbeddingOptions {
  // torch's padding_idx: the row (counted from the end where negative) that is initialised to
  // zeros and gets no gradient.
  std::optional<std::int64_t> padding_idx{};
  // The weight's initial values: N(0, 1) from counter-based random numbers seeded by
  // parameter_seed(seed, "weight") (nn/init.hpp), the same at every partitioning.
  std::uint64_t seed = 0;
  // The grid axis of the layer's partition that splits the weight's rows (the vocabulary), or -1:
  // the whole table on every rank.
  int vocab_split_axis = -1;
};

// y[..., :] = weight[indices[...], :] for indices of any shape [...] holding integer values in
// [0, num_embeddings) as T (exact in float up to 2^24); y is [..., embedding_dim], laid out as the
// indices with a last axis of embedding_dim, unsplit. Parameter "weight" [num_embeddings,
// embedding_dim] (torch's name; per_replica). The indices are a constant (no gradient). Gradient
// (recorded when the weight requires one): dweight[v, :] = the sum of dy[i, :] over every i with
// indices[i] = v (none for the padding row). A value that is not an integer in range is an Error on
// every rank of the indices' partition (checked by one agreement there).
//
// Without a split axis the layer is local: the weight is replicated over `partition` (by default
// this process alone), one copy per rank, each rank looking up its own box of the indices (split
// any way); every rank holding indices must be in the partition. Each copy's gradient comes from
// its own rank's indices (the sum convention's component, as Linear's replicas).
//
// With vocab_split_axis g (Megatron's VocabParallelEmbedding): the weight's rows are split over
// grid axis g of `partition` (balanced), replicated over the other grid axes. The indices live on
// the partition, not split over g (every rank of a group along g holds the same box). Each rank
// looks up the indices in its block of rows (zeros for the others), and an AllSumReduce over g
// adds the groups' partial results, so every rank of a group holds the whole lookup of its box;
// the adjoint is AllSumReduce's, on the tape. Construction and forward are then collective over
// the partition's ranks.
//
//   nn::Embedding<float> tokens(50257, 768, {.seed = 1});
//   nn::Embedding<float> split(50257, 768, Partition::world(Shape{4}), {.vocab_split_axis = 0});
template <class T>
class Embedding : public Module<T> {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, EmbeddingOptions options = {});
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Partition partition,
            EmbeddingOptions options = {});

  std::int64_t num_embeddings() const noexcept { return num_; }
  std::int64_t embedding_dim() const noexcept { return dim_; }
  const EmbeddingOptions& options() const noexcept { return options_; }
  const Partition& partition() const noexcept { return partition_; }
  Var<T>& weight() noexcept { return weight_; }

  // y's space for indices in `indices`: their shape and blocks with a last axis of embedding_dim,
  // unsplit.
  TensorSpace output_space(const TensorSpace& indices) const;

  Var<T> forward(Tape& tape, const DistTensor<T>& indices);

 private:
  std::int64_t num_;
  std::int64_t dim_;
  EmbeddingOptions options_;
  Partition partition_;
  std::int64_t padding_ = -1;  // the padding row, or -1
  Var<T> weight_;
  // The all-sum-reduce of the partial lookups over the split axis, for the last output space.
  std::shared_ptr<const AllSumReduce<T>> reduce_;
};

extern template class Embedding<float>;
extern template class Embedding<double>;

}  // namespace distop::nn
