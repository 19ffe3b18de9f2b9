#pragma once
// The model-parallel MLP of the example: DistributedLinear layers with ReLU between them, their
// weight grids chosen from the rank count so that each layer's output partition is the next
// layer's input partition.

#include <distop/distop.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace distop::examples {

// The weight grids, as [P_out, P_in] and the ranks in row-major order, for a chain of `layers`
// layers over `ranks` ranks. The first grid is [a, ranks / a] with a the largest divisor of ranks
// whose square is at most ranks; each following grid puts the previous output ranks (its column
// 0) in its row 0 and the other ranks in the rows below; the last layer has P_out = 1, so the
// logits end on rank 0.
struct LayerGrid {
  Shape shape;
  std::vector<int> ranks;
};
std::vector<LayerGrid> mlp_grids(int ranks, int layers);

class ModelParallelMlp {
 public:
  // sizes: features of the input, each hidden layer, and the output. Collective.
  ModelParallelMlp(const std::vector<std::int64_t>& sizes, std::uint64_t seed);

  TensorSpace input_space(std::int64_t batch) const { return layers_.front().input_space(batch); }
  // Whether this rank holds the logits (rank 0).
  bool holds_output() const { return layers_.back().output_partition().active(); }
  Var<float> forward(Tape& tape, const Var<float>& x);
  std::vector<Var<float>> parameters() const;
  // "fc1.weight", "fc1.bias", ... as in a PyTorch state_dict.
  io::NamedParameters<float> named_parameters() const;
  // One line per layer: its shape and weight grid.
  std::string describe() const;

 private:
  std::vector<nn::DistributedLinear<float>> layers_;
};

}  // namespace distop::examples
