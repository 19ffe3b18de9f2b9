#include "model.hpp"

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
