#include "model.hpp"

#include <algorithm>

namespace distop::examples {

ModelParallelMlp::ModelParallelMlp(const std::vector<std::int64_t>& sizes, std::uint64_t seed,
                                   MPI_Comm comm) {
  DISTOP_CHECK(sizes.size() >= 2, "ModelParallelMlp", "need at least input and output sizes");
  int ranks = 0;
  MPI_Comm_size(comm, &ranks);
  const int layers = static_cast<int>(sizes.size()) - 1;
  const auto grids = linear_chain_grids(ranks, layers);
  for (int l = 0; l < layers; ++l)
    layers_.push_back(
        register_module("fc" + std::to_string(l + 1),
                        std::make_shared<nn::DistributedLinear<float>>(
                            sizes[l], sizes[l + 1], Partition(comm, grids[l].shape, grids[l].ranks),
                            nn::LinearOptions{.seed = seed + static_cast<std::uint64_t>(l)})));
}

train::ModelFootprint ModelParallelMlp::footprint(const std::vector<std::int64_t>& sizes, int ranks,
                                                  int rank) {
  DISTOP_CHECK(sizes.size() >= 2, "ModelParallelMlp", "need at least input and output sizes");
  const int layers = static_cast<int>(sizes.size()) - 1;
  const auto grids = linear_chain_grids(ranks, layers);
  // The largest block of `n` split `parts` ways.
  const auto block = [](std::int64_t n, std::int64_t parts) {
    return static_cast<double>((n + parts - 1) / parts);
  };
  train::ModelFootprint m;
  for (int l = 0; l < layers; ++l) {
    const auto& g = grids[static_cast<std::size_t>(l)];
    const auto at = std::find(g.ranks.begin(), g.ranks.end(), rank);
    if (at == g.ranks.end()) continue;
    const std::int64_t p_out = g.shape[0], p_in = g.shape[1];
    const bool output_column = (at - g.ranks.begin()) % p_in == 0;
    const double in = block(sizes[l], p_in), out = block(sizes[l + 1], p_out);
    double activations = in + out;  // x_j broadcast to it, its partial output z_ij
    if (output_column) activations += out * (l + 1 < layers ? 2 : 1);  // y_i, and the ReLU's
    m.add({"fc" + std::to_string(l + 1), in * out + (output_column ? out : 0), activations, 0});
  }
  return m;
}

Var<float> ModelParallelMlp::forward(Tape& tape, const Var<float>& x) {
  Var<float> h = x;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    h = layers_[l]->forward(tape, h);
    if (l + 1 < layers_.size()) h = nn::relu(tape, h);
  }
  return h;
}

std::string ModelParallelMlp::describe() const {
  std::string s;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const auto& L = *layers_[l];
    s += "  fc" + std::to_string(l + 1) + ": " + std::to_string(L.in_features()) + " -> " +
         std::to_string(L.out_features()) + " on " + L.weight_partition().str() + "\n";
  }
  return s;
}

}  // namespace distop::examples
