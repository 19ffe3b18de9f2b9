// LeNet-5 trained on Fashion-MNIST with its convolutions and pooling spatially partitioned (halo
// exchanges between neighbouring ranks) and its fully connected layers on 2-D weight grids.
//
//   mpiexec -n 4 build/examples/lenet5/lenet5 --epochs 10 --checkpoint-dir lenet5-run
//
// With the same --init file and --no-shuffle the losses agree across rank counts (1, 2, 4) to
// float rounding. --checkpoint-dir keeps the latest checkpoint and metrics.csv there; --resume
// continues from it exactly as if the run had not stopped.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>

#include "model.hpp"

using namespace distop;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.epochs = 10;
  o.batch_size = 64;
  o.lr = 0.02;
  o.lr_schedule = "cosine";
  CLI::App app{
      "LeNet-5 on Fashion-MNIST, spatially partitioned (distop example). Run under "
      "mpiexec -n N with N = 1, 2, 4 or 8."};
  train::add_training_options(app, o);
  return train::run_main(argc, argv, app, "lenet5", [&] {
    auto train_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, true);
    auto test_set = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, false);
    DISTOP_CHECK(
        train_set.rows == examples::LeNet5::kRows && train_set.cols == examples::LeNet5::kCols,
        "lenet5", "LeNet-5 takes 28 x 28 images, found ", train_set.rows, " x ", train_set.cols);
    parallel::Replicas replicas(MPI_COMM_WORLD, o.replicas);
    // The model and a batch must fit in memory, checked before anything large is allocated.
    int model_ranks = 1;
    MPI_Comm_size(replicas.model_comm(), &model_ranks);
    train::check_training_fits("lenet5", examples::LeNet5::footprint(model_ranks),
                               train::examples_per_step(o, train_set.size), o, o.replicas,
                               "the model");
    examples::LeNet5 model(o.seed, replicas.model_comm());
    // Each rank loads its spatial block of the batch's images (the local box [batch, 1, rows,
    // cols] at offset (0, 0, r0, c0)).
    train::CrossEntropyLoss<float> loss;
    return train::fit(
        model, loss, train_set, &test_set, o,
        {.program = "lenet5", .replicas = &replicas, .save_metadata = {{"model", "lenet5"}}});
  });
}
