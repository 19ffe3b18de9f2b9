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

std::string conv_line(const char* name, const nn::Conv<float>& c, std::int64_t rows_in,
                      std::int64_t cols_in) {
  return std::string("  ") + name + ": " + std::to_string(c.in_channels()) + " -> " +
         std::to_string(c.out_channels()) + ", 3x3 pad 1 on " + std::to_string(rows_in) + " x " +
         std::to_string(cols_in) + ", ReLU, 2x2 max pool\n";
}

}  // namespace

ConvNet::ConvNet(std::int64_t channels, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                 MPI_Comm comm)
    : channels_(channels),
      rows_(checked_extent(rows, "rows")),
      cols_(checked_extent(cols, "columns")),
      replicas_(Partition(comm, Shape{ranks_of(comm)})),
      batch_grid_(replicas_.reshape(Shape{ranks_of(comm), 1, 1, 1})),
      conv1_(register_module(
          "conv1", std::make_shared<nn::Conv<float>>(2, channels, 32, 3, replicas_,
                                                     nn::ConvOptions{.padding = 1, .seed = seed}))),
      conv2_(register_module(
          "conv2", std::make_shared<nn::Conv<float>>(
                       2, 32, 64, 3, replicas_, nn::ConvOptions{.padding = 1, .seed = seed + 1}))),
      conv3_(register_module(
          "conv3", std::make_shared<nn::Conv<float>>(
                       2, 64, 128, 3, replicas_, nn::ConvOptions{.padding = 1, .seed = seed + 2}))),
      fc1_(register_module(
          "fc1", std::make_shared<nn::Linear<float>>(128 * (rows / 8) * (cols / 8), 1024, replicas_,
                                                     nn::LinearOptions{.seed = seed + 3}))),
      fc2_(register_module(
          "fc2", std::make_shared<nn::Linear<float>>(1024, kClasses, replicas_,
                                                     nn::LinearOptions{.seed = seed + 4}))),
      dropout_(register_module("dropout", std::make_shared<nn::Dropout<float>>(
                                              0.5, nn::DropoutOptions{.seed = seed + 5}))),
      pool_(nn::PoolKind::max, 2, 2) {}

TensorSpace ConvNet::input_space(std::int64_t batch) const {
  DISTOP_CHECK(batch >= batch_grid_.size(), kOp, "a batch of ", batch,
               " examples cannot be split over ", batch_grid_.size(),
               " ranks: every rank needs one at least");
  return TensorSpace(Shape{batch, channels_, rows_, cols_}, batch_grid_);
}

Var<float> ConvNet::forward(Tape& tape, const Var<float>& x) {
  // relu(pool(.)) = pool(relu(.)) exactly (see the class comment), on a quarter of the entries.
  auto h = nn::relu(tape, pool_.forward(tape, conv1_->forward(tape, x)));
  h = nn::relu(tape, pool_.forward(tape, conv2_->forward(tape, h)));
  h = nn::relu(tape, pool_.forward(tape, conv3_->forward(tape, h)));
  h = nn::relu(tape, fc1_->forward(tape, nn::flatten(tape, h)));
  return fc2_->forward(tape, dropout_->forward(tape, h));
}

std::string ConvNet::describe() const {
  std::string s("  data parallel: the batch split over ");
  s += batch_grid_.str();
  s += ", every layer replicated on each\n";
  s += conv_line("conv1", *conv1_, rows_, cols_);
  s += conv_line("conv2", *conv2_, rows_ / 2, cols_ / 2);
  s += conv_line("conv3", *conv3_, rows_ / 4, cols_ / 4);
  s += "  flatten: 128 x " + std::to_string(rows_ / 8) + " x " + std::to_string(cols_ / 8) + " = " +
       std::to_string(features()) + " features\n";
  char p[32];
  std::snprintf(p, sizeof p, "%g", dropout_->p());
  s += "  fc1: " + std::to_string(features()) + " -> 1024, ReLU, dropout " + p + "\n";
  s += "  fc2: 1024 -> 10\n";
  return s;
}

}  // namespace distop::examples
