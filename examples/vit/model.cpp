#include "model.hpp"

#include <distop/kernels/box.hpp>
#include <distop/kernels/transpose.hpp>
#include <map>
#include <optional>
#include <utility>

namespace distop::examples {

namespace {

constexpr const char* kOp = "vit";
constexpr int kSequenceAxis = 0, kTensorAxis = 1;

// A space of `global` on `p`, whole on every rank (replicated over the grid).
TensorSpace whole_on(const Partition& p, const Shape& global) {
  return TensorSpace(
      p, Decomposition::balanced(global, p.shape(), std::vector<int>(global.rank(), -1)));
}

// The patch embedding's maps [N, E, h, w] -> the tokens [N, h w, E] in `out` (torch's
// x.flatten(2).transpose(1, 2)): each rank transposes each sample of its box, [E, h w] -> [h w, E].
// Local (no messages); backward transposes the gradient back.
Var<float> maps_to_tokens(Tape& tape, const Var<float>& maps, const TensorSpace& out) {
  return make_function<float>(tape, "maps_to_tokens", {maps}, [&] {
    const Tensor<float>& x = maps.value().local();
    const std::int64_t n = x.rank() == 4 ? x.extent(0) : 0;
    const std::int64_t e = n > 0 ? x.extent(1) : 0, p = n > 0 ? x.extent(2) * x.extent(3) : 0;
    DistTensor<float> y = DistTensor<float>::uninitialized(out);
    for (std::int64_t i = 0; i < n; ++i) {
      Tensor<float> yi = y.local().slice(i * p * e, Shape{p, e});
      kernels::transpose(x.slice(i * e * p, Shape{e, p}), 0.0f, yi);
    }
    return Computed{std::move(y), [n, e, p](const DistTensor<float>& dy, Gradients<float>& g) {
                      g.accumulate(0, [&](float beta, Tensor<float>& dx) {
                        for (std::int64_t i = 0; i < n; ++i) {
                          Tensor<float> dxi = dx.slice(i * e * p, Shape{e, p});
                          kernels::transpose(dy.local().slice(i * p * e, Shape{p, e}), beta, dxi);
                        }
                      });
                    }};
  });
}

// The class token's row of the token tensor h [N, L, E] -> [N, 1, E] in `out` (on the ranks of
// the token block holding token 0, which copy it out of their box; the other ranks hold nothing).
// Local; backward puts the gradient back into row 0 (zeros elsewhere).
Var<float> first_token(Tape& tape, const Var<float>& h, const TensorSpace& out) {
  return make_function<float>(
      tape, "first_token", {h},
      [&] {
        DistTensor<float> y(out);
        const Shape& box = out.local_shape();
        const Box rows{{0, 0, 0}, {box[0], 1, box[2]}};
        if (y.local_numel() > 0) kernels::copy_box(h.value().local(), rows, y.local(), rows);
        return Computed{std::move(y), [rows](const DistTensor<float>& dy, Gradients<float>& g) {
                          g.accumulate(0, [&](float beta, Tensor<float>& dx) {
                            if (beta == 0.0f) dx.fill(0.0f);
                            if (!rows.empty()) kernels::copy_box(dy.local(), rows, dx, rows, true);
                          });
                        }};
      },
      FunctionOptions{.collective = true});
}

// A tied y (the same on every rank of the Broadcast's range) -> its canonical copy, the
// Broadcast's source box; backward: the tied gradient, B ds, on every rank of the range (the
// gradient with respect to the one value, nn/tensor_parallel.hpp). Collective over the range.
Var<float> canonical_copy(Tape& tape, const Var<float>& y,
                          const std::shared_ptr<const Broadcast<float>>& b) {
  return make_function<float>(
      tape, "canonical_copy", {y},
      [&] {
        DistTensor<float> s(b->domain());
        if (s.local_numel() > 0) s.local().copy_from(y.value().local());
        return Computed{std::move(s), [b](const DistTensor<float>& ds, Gradients<float>& g) {
                          g.add(0, b->apply(ds));
                        }};
      },
      FunctionOptions{.collective = true});
}

// With S > 1: the tokens split over grid axis 0 in balanced blocks (the class token in block 0),
// attention across them by the strategy.
std::optional<nn::SequenceParallel> sequence_parallel(const ViTConfig& c) {
  if (c.sequence_parallel == 1) return std::nullopt;
  return nn::SequenceParallel{.sequence_axis = kSequenceAxis,
                              .strategy = nn::parse_sequence_parallel_strategy(c.sp_strategy),
                              .layout = nn::SequenceLayout::contiguous};
}

// The grid [S, T] over `comm`, after checking the sizes (Errors on every rank).
Partition checked_grid(const ViTConfig& c, MPI_Comm comm) {
  const std::int64_t t = c.tensor_parallel, s = c.sequence_parallel;
  DISTOP_CHECK(t >= 1 && s >= 1, kOp,
               "--tensor-parallel and --sequence-parallel must be at least 1,", " found ", t,
               " and ", s);
  int ranks = 0;
  MPI_Comm_size(comm, &ranks);
  DISTOP_CHECK(ranks == t * s, kOp, "the model runs on --tensor-parallel ", t,
               " x --sequence-parallel ", s, " = ", t * s, " ranks, found ", ranks);
  DISTOP_CHECK(c.patch >= 1 && c.image % c.patch == 0, kOp, "--patch ", c.patch,
               " does not divide the ", c.image, " x ", c.image, " images");
  DISTOP_CHECK(c.embed_dim >= 1 && c.heads >= 1 && c.embed_dim % c.heads == 0, kOp, "--embed-dim ",
               c.embed_dim, " is not a multiple of --heads ", c.heads);
  DISTOP_CHECK(c.heads % t == 0, kOp, "--heads ", c.heads,
               " is not a multiple of --tensor-parallel ", t, " (each rank computes whole heads)");
  DISTOP_CHECK(c.mlp_dim >= 1 && c.mlp_dim % t == 0, kOp, "--mlp-dim ", c.mlp_dim,
               " is not a multiple of --tensor-parallel ", t);
  DISTOP_CHECK(c.depth >= 1, kOp, "--depth must be at least 1, found ", c.depth);
  nn::parse_sequence_parallel_strategy(c.sp_strategy);  // an Error for an unknown name
  DISTOP_CHECK(c.tokens() >= s, kOp, "--sequence-parallel ", s, " splits ", c.tokens(),
               " tokens: more ranks than tokens");

  return Partition(comm, Shape{s, t});
}

}  // namespace

// torch's nn.ModuleList of the encoder blocks: children "0", "1", ...
class ViT::Blocks : public nn::Module<float> {
 public:
  Blocks(const ViTConfig& c, const Partition& grid) {
    for (std::int64_t i = 0; i < c.depth; ++i) {
      const std::string name = std::to_string(i);
      blocks_.push_back(
          register_module(name, std::make_shared<nn::TensorParallelTransformerEncoderLayer<float>>(
                                    c.embed_dim, c.heads, c.mlp_dim, grid,
                                    nn::TensorParallelTransformerEncoderLayerOptions{
                                        .tensor_axis = kTensorAxis,
                                        .dropout = 0.0,
                                        .seed = nn::parameter_seed(c.seed, "layers." + name),
                                        .sequence_parallel = sequence_parallel(c)})));
    }
  }
  Var<float> forward(Tape& tape, Var<float> h) {
    for (auto& b : blocks_) h = b->forward(tape, h);
    return h;
  }

 private:
  std::vector<std::shared_ptr<nn::TensorParallelTransformerEncoderLayer<float>>> blocks_;
};

// The spaces and operators of one batch size, built on first use (collectively: every rank runs
// forward with the same batch sizes in the same order).
struct ViT::Plans {
  struct Batch {
    TensorSpace tokens;    // [N, h w, E], whole on every rank
    TensorSpace embedded;  // [N, L, E], whole on every rank
    TensorSpace blocks;    // [N, L, E], the tokens split over the grid's axis 0, tied along axis 1
    TensorSpace first;     // [N, 1, E] on the ranks of block 0
    TensorSpace features;  // [N, E] on the ranks of block 0
    std::shared_ptr<const AllSumReduce<float>> sequence_sum;  // S > 1: f's adjoint along axis 0
    std::shared_ptr<const Repartition<float>> keep_block;     // S > 1: each rank's tokens
    std::shared_ptr<const Broadcast<float>> to_group;         // rank (0, 0) -> block 0's ranks
  };
  std::map<std::int64_t, Batch> by_batch;
};

ViT::ViT(const ViTConfig& c, MPI_Comm comm)
    : config_(c),
      grid_(checked_grid(c, comm)),
      block0_(grid_.slice(kSequenceAxis, 0)),
      head_ranks_(block0_.slice(kTensorAxis, 0)) {
  // Registered in torch's state_dict order: the module's own parameters, then its children.
  const std::int64_t e = c.embed_dim;
  cls_token_ = register_parameter(
      "cls_token", Var<float>(DistTensor<float>(whole_on(grid_, Shape{1, 1, e})), true));
  DistTensor<float> pos(whole_on(grid_, Shape{1, c.tokens(), e}));
  nn::normal_init(pos, nn::parameter_seed(c.seed, "pos_embedding"), 0.0, 0.02);
  pos_embedding_ = register_parameter("pos_embedding", Var<float>(std::move(pos), true));
  patch_embed_ = register_module(
      "patch_embed",
      std::make_shared<nn::Conv<float>>(
          2, c.channels, e, c.patch, grid_,
          nn::ConvOptions{.stride = c.patch, .seed = nn::parameter_seed(c.seed, "patch_embed")}));
  layers_ = register_module("layers", std::make_shared<Blocks>(c, grid_));
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm<float>>(e, block0_));
  head_ =
      register_module("head", std::make_shared<nn::Linear<float>>(
                                  e, c.classes, head_ranks_,
                                  nn::LinearOptions{.seed = nn::parameter_seed(c.seed, "head")}));
  plans_ = std::make_shared<Plans>();
}

TensorSpace ViT::input_space(std::int64_t batch) const {
  return whole_on(grid_, Shape{batch, config_.channels, config_.image, config_.image});
}

Var<float> ViT::forward(Tape& tape, const Var<float>& x) {
  const std::int64_t n = x.space().global_shape()[0], e = config_.embed_dim;
  const std::int64_t l = config_.tokens();
  auto [at, fresh] = plans_->by_batch.try_emplace(n);
  Plans::Batch& p = at->second;
  if (fresh) {
    p.tokens = whole_on(grid_, Shape{n, config_.patches(), e});
    p.embedded = whole_on(grid_, Shape{n, l, e});
    p.blocks = TensorSpace(
        grid_, Decomposition::balanced(Shape{n, l, e}, grid_.shape(), {-1, kSequenceAxis, -1}));
    p.first = whole_on(block0_, Shape{n, 1, e});
    p.features = whole_on(block0_, Shape{n, e});
    if (config_.sequence_parallel > 1) {
      p.sequence_sum =
          std::make_shared<const AllSumReduce<float>>(p.embedded, std::vector<int>{kSequenceAxis});
      p.keep_block = std::make_shared<const Repartition<float>>(p.embedded, p.blocks);
    }
    p.to_group =
        std::make_shared<const Broadcast<float>>(whole_on(head_ranks_, Shape{n, e}), block0_);
    DISTOP_CHECK(p.to_group->range() == p.features, kOp, "the class token's broadcast reaches ",
                 p.to_group->range().str(), ", expected ", p.features.str());
  }

  // Every rank embeds every token alike: the patches, the class token in front, the positions.
  const Var<float> maps = patch_embed_->forward(tape, x);
  Var<float> h = maps_to_tokens(tape, maps, p.tokens);
  const Var<float> cls =
      nn::add(tape, Var<float>(DistTensor<float>(whole_on(grid_, Shape{n, 1, e}))), cls_token_);
  h = nn::add(tape, nn::concat(tape, {cls, h}, 1), pos_embedding_);
  if (p.keep_block) {
    // Tied over the sequence ranks too (their gradients, each from its own block, summed), then
    // each keeps its block of tokens (a local slice).
    h = apply<float>(tape, p.keep_block, nn::tensor_parallel_copy(tape, h, p.sequence_sum));
  }
  h = layers_->forward(tape, h);
  // The class token's output, normalised on block 0's ranks, to rank (0, 0) for the head.
  const Var<float> first = norm_->forward(tape, first_token(tape, h, p.first));
  return head_->forward(tape, canonical_copy(tape, nn::flatten(tape, first), p.to_group));
}

std::string ViT::describe() const {
  const ViTConfig& c = config_;
  const std::int64_t side = c.image / c.patch;
  std::string s = "  grid [S, T] = " + grid_.shape().str() + ": tokens split over " +
                  std::to_string(c.sequence_parallel) + " rank(s), heads and MLP over " +
                  std::to_string(c.tensor_parallel) + "\n";
  s += "  patch_embed: Conv2d(" + std::to_string(c.channels) + ", " + std::to_string(c.embed_dim) +
       ", " + std::to_string(c.patch) + ", stride " + std::to_string(c.patch) +
       "): " + std::to_string(side) + " x " + std::to_string(side) +
       " patches + cls_token = " + std::to_string(c.tokens()) + " tokens, pos_embedding\n";
  s += "  layers: " + std::to_string(c.depth) + " pre-norm encoder blocks, embed " +
       std::to_string(c.embed_dim) + ", " + std::to_string(c.heads) + " heads, MLP " +
       std::to_string(c.mlp_dim) + " (GELU)\n";
  s += "  norm, head: LayerNorm(" + std::to_string(c.embed_dim) + ") and Linear(" +
       std::to_string(c.embed_dim) + ", " + std::to_string(c.classes) +
       ") of the class token on rank (0, 0)\n";
  return s;
}

}  // namespace distop::examples
