#include "model.hpp"

#include <algorithm>

#include "grids.hpp"

namespace distop::examples {

namespace {

constexpr const char* kOp = "LeNet5";

int ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

// The convolutions' grid [1, 1, n / a, a]: the rows (height) get the larger share of the split,
// so that every rank keeps rows as long as possible (the kernels' inner loops run along a row;
// 2 ranks split the height, 4 a 2 x 2 grid, 8 a 4 x 2 grid).
Partition spatial_grid(MPI_Comm comm) {
  const int n = ranks_of(comm);
  const int a = square_rows(n);
  return Partition(comm, Shape{1, 1, n / a, a});
}

// fc1's input ranks as a [1, P_in, 1, 1] grid: the [N, 16, 5, 5] maps split by channel.
Partition by_channel(const Partition& fc1_input) {
  const auto p_in = fc1_input.size();
  DISTOP_CHECK(16 % p_in == 0, kOp, "fc1's input is split ", p_in,
               " ways, which does not divide its 16 channels; run at 1, 2, 4 or 8 ranks");
  return fc1_input.reshape(Shape{1, p_in, 1, 1});
}

}  // namespace

LeNet5::LeNet5(std::uint64_t seed, MPI_Comm comm)
    : conv1_(register_module("conv1", std::make_shared<nn::DistributedConv<float>>(
                                          2, 1, 6, 5, spatial_grid(comm),
                                          nn::ConvOptions{.padding = 2, .seed = seed}))),
      conv2_(register_module(
          "conv2", std::make_shared<nn::DistributedConv<float>>(
                       2, 6, 16, 5, spatial_grid(comm), nn::ConvOptions{.seed = seed + 1}))),
      pool_(nn::PoolKind::max, 2, 2),
      fc_(register_fc(seed, comm)),
      by_channel_(by_channel(fc_.front()->input_partition())) {}

std::vector<std::shared_ptr<nn::DistributedLinear<float>>> LeNet5::register_fc(std::uint64_t seed,
                                                                               MPI_Comm comm) {
  const auto grids = linear_chain_grids(ranks_of(comm), 3);
  const std::int64_t sizes[] = {400, 120, 84, kClasses};
  std::vector<std::shared_ptr<nn::DistributedLinear<float>>> fc;
  for (std::size_t l = 0; l < 3; ++l)
    fc.push_back(
        register_module("fc" + std::to_string(l + 1),
                        std::make_shared<nn::DistributedLinear<float>>(
                            sizes[l], sizes[l + 1], Partition(comm, grids[l].shape, grids[l].ranks),
                            nn::LinearOptions{.seed = seed + 2 + l})));
  return fc;
}

TensorSpace LeNet5::input_space(std::int64_t batch) const {
  return conv1_->input_space(batch, Shape{kRows, kCols});
}

Var<float> LeNet5::forward(Tape& tape, const Var<float>& x) {
  // relu(pool(.)) = pool(relu(.)) exactly (see the class comment), on a quarter of the entries.
  auto h = nn::relu(tape, pool_.forward(tape, conv1_->forward(tape, x)));
  h = nn::relu(tape, pool_.forward(tape, conv2_->forward(tape, h)));
  const std::int64_t batch = h.space().global_shape()[0];
  auto& to_fc = to_fc_[batch];
  if (!to_fc)
    to_fc = std::make_shared<const Repartition<float>>(
        h.space(), TensorSpace(h.space().global_shape(), by_channel_));
  h = nn::flatten(tape, apply<float>(tape, to_fc, h), fc_.front()->input_space(batch));
  for (std::size_t l = 0; l < fc_.size(); ++l) {
    h = fc_[l]->forward(tape, h);
    if (l + 1 < fc_.size()) h = nn::relu(tape, h);
  }
  return h;
}

train::ModelFootprint LeNet5::footprint(int ranks) {
  const double share = 1.0 / std::max(ranks, 1);
  train::ModelFootprint m;
  m.input(static_cast<double>(kRows * kCols), share);
  m.conv("conv1", 1, 6, 25, kRows * kCols, share);
  m.elementwise("pool1", 6 * 14 * 14, share);
  m.elementwise("relu1", 6 * 14 * 14, share);
  m.conv("conv2", 6, 16, 25, 10 * 10, share);
  m.elementwise("pool2", 16 * 5 * 5, share);
  m.elementwise("relu2", 16 * 5 * 5, share);
  m.elementwise("repartition", 16 * 5 * 5, share);
  const std::int64_t sizes[] = {400, 120, 84, kClasses};
  for (int l = 0; l < 3; ++l) {
    m.linear("fc" + std::to_string(l + 1), sizes[l], sizes[l + 1], share);
    if (l < 2) m.elementwise("relu", static_cast<double>(sizes[l + 1]), share);
  }
  return m;
}

std::string LeNet5::describe() const {
  std::string s("  conv1: 1 -> 6, 5x5 pad 2, then 2x2 max pool, on ");
  s += conv1_->weight_partition().str();
  s += "\n  conv2: 6 -> 16, 5x5, then 2x2 max pool, on ";
  s += conv2_->weight_partition().str();
  s += "\n  repartition: [N, 16, 5, 5] to ";
  s += by_channel_.str();
  s += "\n";
  for (std::size_t l = 0; l < fc_.size(); ++l) {
    const auto& L = *fc_[l];
    s += "  fc";
    s += std::to_string(l + 1);
    s += ": ";
    s += std::to_string(L.in_features());
    s += " -> ";
    s += std::to_string(L.out_features());
    s += " on ";
    s += L.weight_partition().str();
    s += "\n";
  }
  return s;
}

}  // namespace distop::examples
