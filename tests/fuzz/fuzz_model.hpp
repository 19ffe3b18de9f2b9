// The model the checkpoint fuzz target loads into and fuzz_seeds saves: two parameters on one rank,
// an SGD optimizer with momentum and an Adam optimizer with AMSGrad in two parameter groups, as a
// training loop's checkpoint holds them.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/sgd.hpp"

namespace distop::fuzz {

struct CheckpointModel {
  CheckpointModel()
      : weight(DistTensor<float>(TensorSpace(Shape{2, 3}, Partition::world({1, 1}))), true),
        bias(DistTensor<float>(TensorSpace(Shape{3}, Partition::world({1}))), true),
        optimizer({weight, bias}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}),
        adam(std::vector<optim::Adam<float>::Group>{{{weight}, {.lr = 1e-3, .amsgrad = true}},
                                                    {{bias}, {.lr = 1e-2}}}) {}

  io::NamedParameters<float> named() const { return {{"fc.weight", weight}, {"fc.bias", bias}}; }

  // One step of each optimizer with made-up gradients, so that they have state.
  void step() {
    for (const auto& [name, p] : named()) {
      std::vector<float> g(static_cast<std::size_t>(p.value().local().numel()));
      for (std::size_t k = 0; k < g.size(); ++k) g[k] = std::cos(static_cast<float>(k));
      p.grad().local().copy_from(Tensor<float>::from_vector(p.value().local().shape(), g));
    }
    optimizer.step();
    adam.step();
    optimizer.zero_grad();
  }

  Var<float> weight;
  Var<float> bias;
  optim::SGD<float> optimizer;
  optim::Adam<float> adam;
};

}  // namespace distop::fuzz
