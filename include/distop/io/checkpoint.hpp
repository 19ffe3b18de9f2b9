#pragma once
// Training checkpoints: a model's distributed parameters, the SGD optimizer's state and where the
// training loop stands, in one safetensors file of global tensors, written atomically.
//
// The format. A checkpoint directory holds the latest checkpoint as `checkpoint.safetensors`
// (checkpoint_path(dir)); each save replaces it. It is an ordinary safetensors file (see
// safetensors.hpp) that PyTorch's safetensors.torch.load_file reads:
//
//   "<name>"                      each parameter's global tensor under its name ("conv1.weight"),
//                                 F32 for float models and F64 for double, as save_parameters
//                                 writes it (so load_parameters also reads a checkpoint's weights)
//   "optimizer.momentum.<name>"   the global momentum buffer of each parameter that has one (an
//                                 optimizer parameter that has not been stepped with momentum has
//                                 none, and gets none back when loaded, as in PyTorch)
//   "__metadata__"                strings:
//     "format"                    "distop.checkpoint"
//     "format_version"            "1"
//     "epoch"                     CheckpointInfo::epoch (decimal, as every integer below)
//     "step_in_epoch"             CheckpointInfo::step_in_epoch
//     "global_step"               CheckpointInfo::global_step
//     "seed"                      CheckpointInfo::seed
//     "optimizer"                 "SGD"
//     "sgd.lr", "sgd.momentum", "sgd.dampening", "sgd.weight_decay"
//                                 the optimizer's options, printed with 17 significant digits
//                                 (so they are read back exactly)
//     "sgd.nesterov"              "true" or "false"
//     "user.<key>"                each pair of CheckpointInfo::metadata
//
// Names under "optimizer." are reserved: no parameter may have one.
//
// Writing. Every parameter and momentum buffer is assembled on parent rank 0, which writes the
// file through write_safetensors: to "checkpoint.safetensors.tmp.<pid>" in the same directory,
// fsync'ed, renamed over checkpoint.safetensors and the directory fsync'ed. A crash part way
// leaves the previous checkpoint whole and readable (and perhaps a stale *.tmp.<pid> file, which
// loading ignores and may be deleted).
//
// Reading. Every rank reads the file and takes its own boxes. The checks come first, agreed over
// the parent communicator: a missing file, a file that is not a safetensors file or whose header
// is not valid (truncated, bad JSON), a file that is not a distop checkpoint, or a checkpoint of
// another model (a parameter missing from the file, a tensor the model lacks, a wrong shape or
// dtype) raises the same distop::Error (op "load_checkpoint") on every rank, and then no
// parameter, momentum buffer or option has changed.

#include <cstdint>
#include <string>

#include "distop/io/parameters.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/optim/sgd.hpp"

namespace distop::io {

// Where a training loop stands, so that a resumed run continues exactly as an uninterrupted one
// would. distop's shuffling is a function of (seed, epoch) only (data::Sampler), so these numbers
// and the weights and momentum buffers are the whole state of a loop of SGD steps.
struct CheckpointInfo {
  std::int64_t epoch = 0;          // the epoch to continue in, counted from 0
  std::int64_t step_in_epoch = 0;  // the batches of that epoch already done
  std::int64_t global_step = 0;    // the SGD steps done since training started
  std::uint64_t seed = 0;          // the seed of the initial weights and of the shuffling
  Metadata metadata{};             // the caller's own string pairs, saved and restored as they are
};

// The latest checkpoint of a checkpoint directory: "<dir>/checkpoint.safetensors".
std::string checkpoint_path(const std::string& dir);

// Writes the latest checkpoint of `dir` (created if missing): every parameter, every momentum
// buffer that `optimizer` has, its options and `info`, atomically (see above). Every optimizer
// parameter must be one of `parameters` (they are matched by identity, Var::same_as); a parameter
// that the optimizer does not update is saved without a momentum buffer. Collective over the
// parameters' parent communicator (the first one's; all must have the same ranks); an error (a
// reserved or duplicate name, an unnamed optimizer parameter, a write failure) is raised on every
// rank as distop::Error (op "save_checkpoint").
template <class T>
void save_checkpoint(const std::string& dir, const NamedParameters<T>& parameters,
                     const optim::SGD<T>& optimizer, const CheckpointInfo& info);

// Reads the latest checkpoint of `dir` and restores every parameter's boxes, the optimizer's
// momentum buffers (set_momentum_buffers) and its options (set_options, as PyTorch's
// load_state_dict restores param_groups), and returns the CheckpointInfo it was saved with. Errors
// as described above, on every rank, before anything changes. Collective over the parameters'
// parent communicator.
template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, const NamedParameters<T>& parameters,
                               optim::SGD<T>& optimizer);

extern template void save_checkpoint(const std::string&, const NamedParameters<float>&,
                                     const optim::SGD<float>&, const CheckpointInfo&);
extern template void save_checkpoint(const std::string&, const NamedParameters<double>&,
                                     const optim::SGD<double>&, const CheckpointInfo&);
extern template CheckpointInfo load_checkpoint(const std::string&, const NamedParameters<float>&,
                                               optim::SGD<float>&);
extern template CheckpointInfo load_checkpoint(const std::string&, const NamedParameters<double>&,
                                               optim::SGD<double>&);

}  // namespace distop::io
