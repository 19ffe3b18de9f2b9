#pragma once
// Sequential<T>: modules and functions applied one after another (PyTorch's nn.Sequential).

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// A module with a forward pass of one input: y = m.forward(tape, x).
template <class M, class T>
concept UnaryModule = std::derived_from<M, Module<T>> && requires(M& m, Tape& t, const Var<T>& x) {
  { m.forward(t, x) } -> std::same_as<Var<T>>;
};

// Each step takes the previous step's output. A step is a module (a child named by its index, as
// PyTorch names the children of nn.Sequential: "0.weight", "2.bias", ...) or a function without
// parameters such as nn::relu, which takes an index too, as nn.ReLU does in PyTorch, so the
// names of a Sequential built in the same order as a torch one match it.
//
//   auto net = std::make_shared<nn::Sequential<float>>();
//   net->add(std::make_shared<nn::Linear<float>>(784, 128, nn::LinearOptions{.seed = 1}))
//       .add(nn::relu<float>)
//       .add(std::make_shared<nn::Linear<float>>(128, 10, nn::LinearOptions{.seed = 2}));
//   Var<float> logits = net->forward(tape, x);
template <class T>
class Sequential : public Module<T> {
 public:
  using Function = std::function<Var<T>(Tape&, const Var<T>&)>;

  Sequential() = default;

  template <class M>
  requires UnaryModule<M, T> Sequential& add(std::shared_ptr<M> module) {
    auto m = this->register_module(std::to_string(steps_.size()), std::move(module));
    steps_.push_back([m](Tape& tape, const Var<T>& x) { return m->forward(tape, x); });
    return *this;
  }
  // A step without parameters or state: any callable as Var<T>(Tape&, const Var<T>&).
  Sequential& add(Function function);

  std::size_t size() const noexcept { return steps_.size(); }
  // The steps in order; each one's output is the next one's input.
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  std::vector<Function> steps_;
};

extern template class Sequential<float>;
extern template class Sequential<double>;

}  // namespace distop::nn
