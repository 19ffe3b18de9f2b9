#pragma once
// A module's state_dict as one safetensors file: what PyTorch's
// safetensors.torch.save_file(model.state_dict()) writes and load_file reads.

#include <string>

#include "distop/io/safetensors.hpp"
#include "distop/nn/module.hpp"

namespace distop::io {

// Writes every parameter and buffer of `module` as a global tensor under its state_dict name
// ("conv1.weight", "bn.running_mean", ...): F32 for float modules and F64 for double, counts
// (num_batches_tracked) as I64 of shape []. The tensors are assembled on parent rank 0, which
// writes the file atomically (write_safetensors). Collective over the parameters' parent
// communicator; a write failure is raised on every rank (op "save_state_dict").
template <class T>
void save_state_dict(const std::string& path, const nn::Module<T>& module,
                     const Metadata& metadata = {});

// Reads a safetensors file as a state_dict: F32 and F64 tensors as T (F64 rounded to nearest
// for float), I64 tensors as counts. Any other dtype, or an F64 value beyond float's range, is an
// Error naming the tensor. Local: every rank that calls it reads the file.
template <class T>
nn::StateDict<T> read_state_dict(const std::string& path);

// read_state_dict, then Module::load_state_dict, on every rank: PyTorch's
// model.load_state_dict(load_file(path), strict). With `strict` a tensor the module lacks, or one
// of the module's entries missing from the file, is an error; a wrong shape always is. Every
// error (op "load_state_dict", naming the file and the tensor) is raised on every rank alike, and
// then nothing in the module has changed. Collective over the parameters' parent communicator.
template <class T>
nn::LoadResult load_state_dict(const std::string& path, nn::Module<T>& module, bool strict = true);

}  // namespace distop::io
