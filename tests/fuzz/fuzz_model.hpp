// The model the checkpoint fuzz target loads into and fuzz_seeds saves: two parameters on one rank,
// "fc.weight" and "fc.bias", an SGD optimizer with momentum and an Adam optimizer with AMSGrad in
// two parameter groups, as a training loop's checkpoint holds them.
#pragma once

#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/nn/module.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/sgd.hpp"

namespace distop::fuzz {

// "weight" [2, 3] and "bias" [3] on this rank.
class CheckpointLayer : public nn::Module<float> {
 public:
  CheckpointLayer() {
    register_parameter(
        "weight",
        Var<float>(DistTensor<float>(TensorSpace(Shape{2, 3}, Partition::world({1, 1}))), true));
    register_parameter(
        "bias", Var<float>(DistTensor<float>(TensorSpace(Shape{3}, Partition::world({1}))), true));
  }
};

// The layer under the name "fc".
class CheckpointNet : public nn::Module<float> {
 public:
  CheckpointNet() { register_module("fc", std::make_shared<CheckpointLayer>()); }
};

struct CheckpointModel {
  CheckpointModel()
      : weight(net.parameters().at(0)),
        bias(net.parameters().at(1)),
        optimizer({weight, bias}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}),
        adam(std::vector<optim::Adam<float>::Group>{{{weight}, {.lr = 1e-3, .amsgrad = true}},
                                                    {{bias}, {.lr = 1e-2}}}) {}

  // One step of each optimizer with made-up gradients, so that they have state.
  void step() {
    for (const auto& p : net.parameters()) {
      std::vector<float> g(static_cast<std::size_t>(p.value().local().numel()));
      for (std::size_t k = 0; k < g.size(); ++k) g[k] = std::cos(static_cast<float>(k));
      p.grad().local().copy_from(Tensor<float>::from_vector(p.value().local().shape(), g));
    }
    optimizer.step();
    adam.step();
    optimizer.zero_grad();
  }

  CheckpointNet net;
  Var<float> weight;
  Var<float> bias;
  optim::SGD<float> optimizer;
  optim::Adam<float> adam;
};

}  // namespace distop::fuzz
