#pragma once
// The model-parallel MLP of the example: DistributedLinear layers with ReLU between them, their
// weight grids chosen from the rank count so that each layer's output partition is the next
// layer's input partition.

#include <cstdint>
#include <distop/distop.hpp>
#include <memory>
#include <string>
#include <vector>

#include "grids.hpp"

namespace distop::examples {

// Layer l ("fc<l+1>", as in a PyTorch state_dict) runs on linear_chain_grids(ranks, layers)[l].
class ModelParallelMlp : public nn::Module<float> {
 public:
  // sizes: features of the input, each hidden layer, and the output. Over the ranks of `comm`
  // (one replica's, in data-parallel training); collective over it.
  ModelParallelMlp(const std::vector<std::int64_t>& sizes, std::uint64_t seed,
                   MPI_Comm comm = MPI_COMM_WORLD);

  // What rank `rank` of the `ranks` ranks of a replica holds of the model of `sizes` in training,
  // for train::check_training_fits: per layer of the chain (linear_chain_grids), its block of the
  // weight and of the bias; per example, the block of the layer's input broadcast to it, its
  // partial output, and where it holds the output (column 0 of the grid) the output and the
  // ReLU's. Nothing of a layer whose grid it is not in.
  static train::ModelFootprint footprint(const std::vector<std::int64_t>& sizes, int ranks,
                                         int rank);

  TensorSpace input_space(std::int64_t batch) const { return layers_.front()->input_space(batch); }
  // Whether this rank holds the logits (rank 0).
  bool holds_output() const { return layers_.back()->output_partition().active(); }
  Var<float> forward(Tape& tape, const Var<float>& x);
  // One line per layer: its shape and weight grid.
  std::string describe() const;

 private:
  std::vector<std::shared_ptr<nn::DistributedLinear<float>>> layers_;
};

}  // namespace distop::examples
