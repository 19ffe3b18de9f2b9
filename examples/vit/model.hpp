#pragma once
// A Vision Transformer (ViT) whose encoder blocks are tensor parallel (heads and MLP units split
// over T ranks) and, with sequence parallelism, split along the token axis over S ranks.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>
#include <vector>

namespace distop::examples {

// The model's sizes and how it is split.
struct ViTConfig {
  std::int64_t channels = 1;  // of the images
  std::int64_t image = 28;    // square images of image x image pixels
  std::int64_t patch = 7;     // patches of patch x patch pixels: (image / patch)^2 tokens + 1
  std::int64_t embed_dim = 64;
  std::int64_t heads = 4;
  std::int64_t depth = 4;
  std::int64_t mlp_dim = 128;
  std::int64_t classes = 10;
  int tensor_parallel = 1;    // T: heads and MLP units split over T ranks
  int sequence_parallel = 1;  // S: the tokens split over S ranks
  std::string sp_strategy = "ring";
  std::uint64_t seed = 1;

  std::int64_t patches() const noexcept { return (image / patch) * (image / patch); }
  std::int64_t tokens() const noexcept { return patches() + 1; }
};

// The ViT of the torch twin (examples/vit/torch_twin.py):
//   patch_embed   Conv2d(C, E, patch, stride=patch): [N, C, H, W] -> [N, E, h, w], seen as the
//                 h w tokens [N, h w, E] (torch's flatten(2).transpose(1, 2))
//   cls_token     [1, 1, E], zeros, prepended: [N, 1 + h w, E]
//   pos_embedding [1, 1 + h w, E], N(0, 0.02^2), added
//   layers.i      depth x TransformerEncoderLayer(E, heads, mlp_dim, dropout=0, activation='gelu',
//                 batch_first=True, norm_first=True)
//   norm          LayerNorm(E) of the class token's output
//   head          Linear(E, classes): the logits
// The state_dict has torch's names and global shapes (cls_token, pos_embedding,
// patch_embed.{weight,bias}, layers.i.self_attn.in_proj_weight, ..., norm.{weight,bias},
// head.{weight,bias}); the initial values are a function of the seed alone, the same at any T.
//
// The ranks of `comm` (one replica's, in data-parallel training) form the grid [S, T]: grid axis 1
// splits the heads and MLP units of every block (tensor parallelism), grid axis 0 the tokens
// (sequence parallelism). Between blocks the token tensor [N, 1 + h w, E] is tied along axis 1
// (the same on every rank of a tensor-parallel group, nn/tensor_parallel.hpp) and split along axis
// 0 into balanced blocks of tokens, the class token in block 0. The images are whole on every
// rank, and so are the patch embedding, the class token and the position embeddings: every rank
// embeds all tokens alike, the copies tied (with S > 1 an f along axis 0, identity forward and an
// all-reduce of the gradient backward, ties them over the sequence ranks), then keeps its block of
// tokens. The blocks (TensorParallelTransformerEncoderLayer with sequence_parallel on axis 0,
// ring or all-to-all attention) work on each rank's own tokens; the layers tie their parameters'
// copies over the sequence ranks, so each copy receives the whole gradient. The class token's
// output (on the ranks of block 0) is normalised there, taken to its
// canonical copy, rank (0, 0), whose gradient travels back as a Broadcast to the tensor-parallel
// group, and the head computes the logits on rank (0, 0) alone: each example's loss counted once.
class ViT : public nn::Module<float> {
 public:
  // Collective over `comm`, which has T S ranks. Errors (on every rank) for sizes that do not fit
  // the split: the image not a multiple of the patch, E not a multiple of the heads, heads or
  // mlp_dim not multiples of T, more sequence ranks than tokens, an unknown strategy.
  ViT(const ViTConfig& config, MPI_Comm comm = MPI_COMM_WORLD);

  // [batch, C, H, W], whole on every rank of the grid.
  TensorSpace input_space(std::int64_t batch) const;
  // The logits [batch, classes] on rank (0, 0) of the grid.
  Var<float> forward(Tape& tape, const Var<float>& x);
  std::string describe() const;

  const Partition& grid() const noexcept { return grid_; }

 private:
  class Blocks;
  struct Plans;

  ViTConfig config_;
  Partition grid_;        // [S, T]
  Partition block0_;      // grid row 0: the ranks holding the class token, [1, T]
  Partition head_ranks_;  // rank (0, 0), [1, 1]
  Var<float> cls_token_;
  Var<float> pos_embedding_;
  std::shared_ptr<nn::Conv<float>> patch_embed_;
  std::shared_ptr<Blocks> layers_;
  std::shared_ptr<nn::LayerNorm<float>> norm_;
  std::shared_ptr<nn::Linear<float>> head_;
  std::shared_ptr<Plans> plans_;  // the operators of the last batch size
};

}  // namespace distop::examples
