// A Vision Transformer (ViT) on Fashion-MNIST or CIFAR-10-format images, with tensor parallelism
// (heads and MLP units split over T ranks), sequence parallelism (tokens split over S ranks) and
// data parallelism (R replicas) combined: T x S x R = the ranks.
//
//   mpiexec -n 4 build/examples/vit/vit --tensor-parallel 2 --replicas 2 --steps 200
//   mpiexec -n 2 build/examples/vit/vit --tensor-parallel 2 --dataset cifar10 --data DIR
//
// The saved weights (--save) load into the torch twin, examples/vit/torch_twin.py.
#include <CLI/CLI.hpp>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>

#include "image_data.hpp"
#include "model.hpp"

using namespace distop;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.epochs = 1;
  o.batch_size = 64;
  o.optimizer = "adamw";
  o.lr = 1e-3;
  examples::ImageDataFlags data_flags;
  examples::ViTConfig c;
  c.patch = 0;  // by data set, below
  CLI::App app{
      "A Vision Transformer (distop example): a strided-convolution patch embedding, a class "
      "token, learned position embeddings, pre-norm encoder blocks (GELU), a LayerNorm and a "
      "linear head on the class token; AdamW. Fashion-MNIST (28 x 28, patches of 7: 16 + 1 "
      "tokens) or CIFAR-10 (--dataset cifar10 --data DIR; 32 x 32 x 3, patches of 4). The ranks "
      "form R data-parallel replicas (--replicas) of a [S, T] grid: T ranks split the heads and "
      "MLP units of every block (--tensor-parallel), S the tokens (--sequence-parallel); "
      "T x S x R must equal the ranks."};
  train::add_training_options(app, o);
  examples::add_image_data_options(app, data_flags);
  app.add_option("--tensor-parallel", c.tensor_parallel,
                 "T: the ranks that split each block's heads and MLP units")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sequence-parallel", c.sequence_parallel,
                 "S: the ranks that split the tokens (attention across them by --sp-strategy)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sp-strategy", c.sp_strategy,
                 "ring (key/value blocks around the ranks) or alltoall (sequence-split to "
                 "head-split and back)")
      ->check(CLI::IsMember({"ring", "alltoall"}))
      ->capture_default_str();
  app.add_option("--embed-dim", c.embed_dim, "E: the width of the tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heads", c.heads, "Attention heads (a multiple of T, dividing E)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--depth", c.depth, "Encoder blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--mlp-dim", c.mlp_dim, "The hidden units of each block's MLP (a multiple of T)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--patch", c.patch,
                 "Patches of P x P pixels, P dividing the image (default 7 on Fashion-MNIST, 4 on "
                 "CIFAR-10)")
      ->check(CLI::PositiveNumber);
  return train::run_main(argc, argv, app, "vit", [&] {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const int model_ranks = c.tensor_parallel * c.sequence_parallel;
    DISTOP_CHECK(model_ranks * o.replicas == world, "vit", "--tensor-parallel ", c.tensor_parallel,
                 " x --sequence-parallel ", c.sequence_parallel, " x --replicas ", o.replicas,
                 " = ", model_ranks * o.replicas, " ranks, but the run has ", world);
    auto [train_set, test_set, cifar] = examples::load_image_data("vit", app, o, data_flags);
    DISTOP_CHECK(train_set.rows == train_set.cols, "vit", "expected square images, found ",
                 train_set.rows, " x ", train_set.cols, " in ", o.data);
    c.channels = train_set.channels;
    c.image = train_set.rows;
    if (c.patch == 0) c.patch = cifar ? 4 : 7;
    c.seed = o.seed;
    parallel::Replicas replicas(MPI_COMM_WORLD, o.replicas);
    examples::ViT model(c, replicas.model_comm());
    train::CrossEntropyLoss<float> loss;
    return train::fit(model, loss, train_set, test_set.size > 0 ? &test_set : nullptr, o,
                      {.program = "vit",
                       .replicas = &replicas,
                       .save_metadata = {{"model", "vit"},
                                         {"dataset", data_flags.dataset},
                                         {"patch", std::to_string(c.patch)},
                                         {"embed_dim", std::to_string(c.embed_dim)},
                                         {"heads", std::to_string(c.heads)},
                                         {"depth", std::to_string(c.depth)},
                                         {"mlp_dim", std::to_string(c.mlp_dim)}}});
  });
}
