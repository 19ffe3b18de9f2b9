// The convolutional network of data-parallel training (three 3x3 convolutions with max pools, two
// fully connected layers, dropout), trained on Fashion-MNIST or CIFAR-10 with every layer
// replicated and the batch split over the ranks.
//
//   build/examples/cnn/cnn --epochs 1 --checkpoint-dir cnn-run
//   build/examples/cnn/cnn --dataset cifar10 --data cifar-10-batches-bin
//
// Until the data-parallel gradient reducer sums the replicas' gradients, it runs at 1 rank only.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>

#include "image_data.hpp"
#include "model.hpp"

using namespace distop;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.epochs = 5;
  o.batch_size = 64;
  o.lr = 0.02;
  o.lr_schedule = "cosine";
  examples::ImageDataFlags data_flags;
  CLI::App app{
      "A data-parallel convolutional network (distop example): conv1 C->32, conv2 32->64, conv3 "
      "64->128 (3x3, padding 1, each with ReLU and a 2x2 max pool), fc1 F->1024 with ReLU and "
      "dropout 0.5, fc2 1024->10. Fashion-MNIST: 1 x 28 x 28 images, F = 128 x 3 x 3 = 1152. "
      "CIFAR-10 (--dataset cifar10 --data DIR): 3 x 32 x 32 images, conv1 takes 3 channels and "
      "F = 128 x 4 x 4 = 2048. Purely data parallel: one replica per rank, each taking "
      "batch-size / ranks examples of every step."};
  train::add_training_options(app, o);
  examples::add_image_data_options(app, data_flags, /*test_examples=*/false);
  return train::run_main(argc, argv, app, "cnn", [&] {
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    // Purely data parallel: one replica per rank.
    if (app.get_option("--replicas")->count() == 0) o.replicas = ranks;
    DISTOP_CHECK(o.replicas == ranks, "cnn",
                 "examples/cnn is purely data parallel: --replicas must be the rank count ", ranks,
                 " (its default), found ", o.replicas);
    parallel::Replicas replicas(MPI_COMM_WORLD, o.replicas);
    const auto [train_set, test_set, cifar] = examples::load_image_data("cnn", app, o, data_flags);
    if (!cifar)
      DISTOP_CHECK(train_set.channels == 1 && train_set.rows == 28 && train_set.cols == 28, "cnn",
                   "Fashion-MNIST has 1 x 28 x 28 images, found ", train_set.channels, " x ",
                   train_set.rows, " x ", train_set.cols, " in ", o.data);
    // The model and a batch must fit in memory, checked before anything large is allocated.
    train::check_training_fits(
        "cnn", examples::ConvNet::footprint(train_set.channels, train_set.rows, train_set.cols),
        train::examples_per_step(o, train_set.size), o, o.replicas, "the model");
    examples::ConvNet model(train_set.channels, train_set.rows, train_set.cols, o.seed,
                            replicas.model_comm());
    train::CrossEntropyLoss<float> loss;
    return train::fit(model, loss, train_set, &test_set, o,
                      {.program = "cnn",
                       .replicas = &replicas,
                       .save_metadata = {{"model", "cnn"}, {"dataset", data_flags.dataset}}});
  });
}
