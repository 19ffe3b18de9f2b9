#pragma once
// The image examples' data sets: the --dataset, --data and --test-examples flags, and the
// training and test sets read collectively (Fashion-MNIST's IDX files or CIFAR-10's binary
// batches).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <distop/distop.hpp>
#include <distop/train/cli.hpp>
#include <string>

namespace distop::examples {

struct ImageDataFlags {
  std::string dataset = "fashion-mnist";  // or cifar10
  std::int64_t test_examples = -1;        // the first N test images only; -1: all
};

// --dataset and the description of --data (added by train::add_training_options before), and
// with `test_examples` --test-examples.
inline void add_image_data_options(CLI::App& app, ImageDataFlags& f, bool test_examples = true) {
  app.get_option("--data")->description(
      "Directory of the data set: Fashion-MNIST's IDX files, or CIFAR-10's data_batch_1.bin .. "
      "data_batch_5.bin and test_batch.bin (binary version; needed with --dataset cifar10)");
  app.add_option("--dataset", f.dataset, "fashion-mnist or cifar10")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10"}))
      ->capture_default_str();
  if (test_examples)
    app.add_option("--test-examples", f.test_examples,
                   "Evaluate on the first N test images only (0: no evaluation; default: all)")
        ->check(CLI::NonNegativeNumber);
}

struct ImageData {
  data::Dataset train, test;
  bool cifar = false;
};

// The training and test sets from o.data, read collectively over MPI_COMM_WORLD (a missing or
// corrupt file is an Error on every rank), the test set cut to f.test_examples. --dataset cifar10
// without --data is an Error naming `program`.
inline ImageData load_image_data(const char* program, const CLI::App& app,
                                 const train::TrainOptions& o, const ImageDataFlags& f) {
  ImageData d;
  d.cifar = f.dataset == "cifar10";
  DISTOP_CHECK(!d.cifar || app.get_option("--data")->count() > 0, program,
               "--dataset cifar10 needs --data DIR, the directory of data_batch_1.bin .. "
               "data_batch_5.bin and test_batch.bin");
  auto load = [&](bool train) {
    return d.cifar ? data::load_cifar10_collective(MPI_COMM_WORLD, o.data, train)
                   : data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, train);
  };
  d.train = load(true);
  d.test = load(false);
  if (f.test_examples >= 0 && f.test_examples < d.test.size) {
    d.test.size = f.test_examples;
    d.test.images.resize(static_cast<std::size_t>(f.test_examples * d.test.pixels()));
    d.test.labels.resize(static_cast<std::size_t>(f.test_examples));
  }
  return d;
}

}  // namespace distop::examples
