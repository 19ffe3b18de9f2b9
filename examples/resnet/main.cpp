// ResNet-18 (torchvision's resnet18, 10 classes) on 32 x 32 images, its convolutions, batch norms
// and pooling spatially partitioned over a grid of ranks, optionally also data parallel.
//
//   mpiexec -n 4 build/examples/resnet/resnet --epochs 1
//   mpiexec -n 4 build/examples/resnet/resnet --replicas 2
//   mpiexec -n 4 build/examples/resnet/resnet --dataset cifar10 --data cifar-10-batches-bin
//
// Fashion-MNIST's 28 x 28 images are padded to 32 x 32 with zeros. The saved weights load into
// torchvision.models.resnet18(num_classes=10) (with conv1 taking one channel for Fashion-MNIST).
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
  o.lr = 0.01;
  o.lr_schedule = "cosine";
  o.weight_decay = 5e-4;
  examples::ImageDataFlags data_flags;
  CLI::App app{
      "ResNet-18 (torchvision's resnet18, 10 classes) on 32 x 32 images, spatially partitioned "
      "(distop example): every convolution, batch norm and pooling on a grid of the ranks of a "
      "replica (2 x 1 at 2 ranks, 2 x 2 at 4), a stage whose maps are smaller than the grid on "
      "fewer ranks. Fashion-MNIST (padded to 32 x 32) or CIFAR-10 (--dataset cifar10 --data DIR). "
      "With --replicas R the ranks form R data-parallel replicas."};
  train::add_training_options(app, o);
  examples::add_image_data_options(app, data_flags);
  return train::run_main(argc, argv, app, "resnet", [&] {
    auto [train_set, test_set, cifar] = examples::load_image_data("resnet", app, o, data_flags);
    if (!cifar) {  // padded to 32 x 32
      DISTOP_CHECK(train_set.rows == 28 && train_set.cols == 28, "resnet",
                   "Fashion-MNIST has 28 x 28 images, found ", train_set.rows, " x ",
                   train_set.cols, " in ", o.data);
      train_set = examples::pad_images(train_set, 2);
      test_set = examples::pad_images(test_set, 2);
    }
    parallel::Replicas replicas(MPI_COMM_WORLD, o.replicas);
    int model_ranks = 1;
    MPI_Comm_size(replicas.model_comm(), &model_ranks);
    // The model and a batch must fit in memory, checked before anything large is allocated.
    train::check_training_fits(
        "resnet", examples::ResNet18::footprint(train_set.channels, model_ranks),
        train::examples_per_step(o, train_set.size), o, o.replicas, "the model");
    examples::ResNet18 model(train_set.channels, o.seed, replicas.model_comm());
    train::CrossEntropyLoss<float> loss;
    return train::fit(model, loss, train_set, test_set.size > 0 ? &test_set : nullptr, o,
                      {.program = "resnet",
                       .replicas = &replicas,
                       .save_metadata = {{"model", "resnet18"}, {"dataset", data_flags.dataset}}});
  });
}
