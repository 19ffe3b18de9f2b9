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

#include "model.hpp"

namespace {

using namespace distop;

// Copies this rank's spatial block of the batch's images: the local box is
// [batch, 1, rows, cols] at offset (0, 0, r0, c0).
void load_block(const data::Dataset& d, const std::vector<std::int64_t>& order,
                const data::BatchRange& range, const TensorSpace& space, DistTensor<float>& x) {
  const auto& local = space.local_shape();
  if (local.numel() == 0) return;
  const auto rows = local[2], cols = local[3];
  const auto r0 = space.local_offset()[2], c0 = space.local_offset()[3];
  std::vector<float> v(static_cast<std::size_t>(local.numel()));
  for (std::int64_t i = 0; i < range.size(); ++i) {
    const float* img = d.image(order[static_cast<std::size_t>(range.begin + i)]);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* src = img + (r0 + r) * d.cols + c0;
      std::copy(src, src + cols, v.begin() + (i * rows + r) * cols);
    }
  }
  x.local().copy_from(Tensor<float>::from_vector(local, v));
}

}  // namespace

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
    examples::LeNet5 model(o.seed, replicas.model_comm());
    return train::fit("lenet5", model, o, train_set, test_set, load_block, {{"model", "lenet5"}},
                      &replicas);
  });
}
