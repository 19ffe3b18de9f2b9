#include "model.hpp"

#include <cstdio>

namespace distop::examples {

namespace {

constexpr const char* kOp = "ConvNet";

int ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

std::int64_t checked_extent(std::int64_t extent, const char* what) {
  DISTOP_CHECK(extent >= 8, kOp, "the images' ", what,
               " must be at least 8 (three 2x2 pools), found ", extent);
  return extent;
}

}  // namespace

ConvNet::ConvNet(std::int64_t channels, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                 MPI_Comm comm)
    : channels_(channels),
      rows_(checked_extent(rows, "rows")),
      cols_(checked_extent(cols, "columns")),
      replicas_(Partition(comm, Shape{ranks_of(comm)})),
      batch_grid_(replicas_.reshape(Shape{ranks_of(comm), 1, 1, 1})),
      features_(channels, rows_, cols_, seed, replicas_),
      conv1_(register_module("conv1", features_.conv1())),
      conv2_(register_module("conv2", features_.conv2())),
      conv3_(register_module("conv3", features_.conv3())),
      fc1_(register_module(
          "fc1", std::make_shared<nn::Linear<float>>(128 * (rows / 8) * (cols / 8), 1024, replicas_,
                                                     nn::LinearOptions{.seed = seed + 3}))),
      fc2_(register_module(
          "fc2", std::make_shared<nn::Linear<float>>(1024, kClasses, replicas_,
                                                     nn::LinearOptions{.seed = seed + 4}))),
      dropout_(register_module("dropout", std::make_shared<nn::Dropout<float>>(
                                              0.5, nn::DropoutOptions{.seed = seed + 5}))) {}

TensorSpace ConvNet::input_space(std::int64_t batch) const {
  DISTOP_CHECK(batch >= batch_grid_.size(), kOp, "a batch of ", batch,
               " examples cannot be split over ", batch_grid_.size(),
               " ranks: every rank needs one at least");
  return TensorSpace(Shape{batch, channels_, rows_, cols_}, batch_grid_);
}

Var<float> ConvNet::forward(Tape& tape, const Var<float>& x) {
  auto h = nn::relu(tape, fc1_->forward(tape, features_.forward(tape, x)));
  return fc2_->forward(tape, dropout_->forward(tape, h));
}

train::ModelFootprint ConvNet::footprint(std::int64_t channels, std::int64_t rows,
                                         std::int64_t cols) {
  train::ModelFootprint m;
  m.input(static_cast<double>(channels * rows * cols));
  ConvFeatures::add_footprint(m, channels, rows, cols);
  m.linear("fc1", 128 * (rows / 8) * (cols / 8), 1024);
  m.elementwise("relu", 1024);
  m.elementwise("dropout", 2 * 1024);  // its output and its mask
  m.linear("fc2", 1024, kClasses);
  return m;
}

std::string ConvNet::describe() const {
  std::string s("  data parallel: the batch split over ");
  s += batch_grid_.str();
  s += ", every layer replicated on each\n";
  s += features_.describe();
  char p[32];
  std::snprintf(p, sizeof p, "%g", dropout_->p());
  s += "  fc1: " + std::to_string(features()) + " -> 1024, ReLU, dropout " + p + "\n";
  s += "  fc2: 1024 -> 10\n";
  return s;
}

}  // namespace distop::examples
