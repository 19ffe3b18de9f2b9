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

#include "model.hpp"

using namespace distop;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.epochs = 1;
  o.batch_size = 64;
  o.lr = 0.01;
  o.lr_schedule = "cosine";
  o.weight_decay = 5e-4;
  std::string dataset = "fashion-mnist";
  std::int64_t test_examples = -1;
  CLI::App app{
      "ResNet-18 (torchvision's resnet18, 10 classes) on 32 x 32 images, spatially partitioned "
      "(distop example): every convolution, batch norm and pooling on a grid of the ranks of a "
      "replica (2 x 1 at 2 ranks, 2 x 2 at 4), a stage whose maps are smaller than the grid on "
      "fewer ranks. Fashion-MNIST (padded to 32 x 32) or CIFAR-10 (--dataset cifar10 --data DIR). "
      "With --replicas R the ranks form R data-parallel replicas."};
  train::add_training_options(app, o);
  app.get_option("--data")->description(
      "Directory of the data set: Fashion-MNIST's IDX files, or CIFAR-10's data_batch_1.bin .. "
      "data_batch_5.bin and test_batch.bin (binary version; needed with --dataset cifar10)");
  app.add_option("--dataset", dataset, "fashion-mnist or cifar10")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10"}))
      ->capture_default_str();
  app.add_option("--test-examples", test_examples,
                 "Evaluate on the first N test images only (0: no evaluation; default: all)")
      ->check(CLI::NonNegativeNumber);
  return train::run_main(argc, argv, app, "resnet", [&] {
    const bool cifar = dataset == "cifar10";
    DISTOP_CHECK(!cifar || app.get_option("--data")->count() > 0, "resnet",
                 "--dataset cifar10 needs --data DIR, the directory of data_batch_1.bin .. "
                 "data_batch_5.bin and test_batch.bin");
    auto load = [&](bool train) {
      auto d = cifar ? data::load_cifar10_collective(MPI_COMM_WORLD, o.data, train)
                     : data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, train);
      if (!cifar) {
        DISTOP_CHECK(d.rows == 28 && d.cols == 28, "resnet",
                     "Fashion-MNIST has 28 x 28 images, found ", d.rows, " x ", d.cols, " in ",
                     o.data);
        d = examples::pad_images(d, 2);
      }
      return d;
    };
    const auto train_set = load(true);
    auto test_set = load(false);
    if (test_examples >= 0 && test_examples < test_set.size) {
      test_set.size = test_examples;
      test_set.images.resize(static_cast<std::size_t>(test_examples * test_set.pixels()));
      test_set.labels.resize(static_cast<std::size_t>(test_examples));
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
                       .save_metadata = {{"model", "resnet18"}, {"dataset", dataset}}});
  });
}
