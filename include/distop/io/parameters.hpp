#pragma once
// Saving and loading a model's distributed parameters as one safetensors file of global tensors.

#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/nn/module.hpp"

namespace distop::io {

// A parameter and the name it has in a file ("fc1.weight", as in a PyTorch state_dict).
template <class T>
using NamedParameters = std::vector<std::pair<std::string, Var<T>>>;

// A module's parameters under their hierarchical names, in registration order.
template <class T>
NamedParameters<T> named_parameters(const nn::Module<T>& module) {
  NamedParameters<T> named;
  for (auto& p : module.named_parameters()) named.emplace_back(std::move(p.name), std::move(p.var));
  return named;
}

// Assembles every parameter on parent rank 0 and writes them there as one safetensors file of
// global tensors (F32 for float, F64 for double), atomically. Collective over the parameters'
// parent communicator; a write failure is raised on every rank.
template <class T>
void save_parameters(const std::string& path, const NamedParameters<T>& parameters,
                     const Metadata& metadata = {});

// Reads a file written by save_parameters (or by PyTorch's safetensors.torch.save_file from a
// state_dict) on every rank and overwrites each parameter's boxes with its part of the global
// tensor. A missing file, a missing tensor, a wrong shape or dtype raises the same Error on every
// rank before any parameter is changed. Collective over the parameters' parent communicator.
template <class T>
void load_parameters(const std::string& path, const NamedParameters<T>& parameters);

}  // namespace distop::io
