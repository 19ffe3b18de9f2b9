#pragma once
// Training checkpoints: a model's distributed parameters, any optimizer's state (optim::Optimizer),
// a learning-rate scheduler's and where the training loop stands, in one safetensors file of
// global tensors, written atomically.
//
// The format. A checkpoint directory holds the latest checkpoint as `checkpoint.safetensors`
// (checkpoint_path(dir)); each save replaces it. It is an ordinary safetensors file (see
// safetensors.hpp) that PyTorch's safetensors.torch.load_file reads:
//
//   "<name>"                      each parameter's and each buffer's global tensor under its
//                                 name ("conv1.weight", "bn.running_mean"), F32 for float models
//                                 and F64 for double, counts (num_batches_tracked, Dropout's
//                                 calls) as I64 of shape []: the model's state_dict, plus its
//                                 non-persistent buffers (nn/module.hpp), so that
//                                 io::load_state_dict also reads a checkpoint's weights
//   "optimizer.<key>.<name>"      the global tensor of the optimizer state <key> (torch's state[p]
//                                 key: "momentum_buffer", "exp_avg", "exp_avg_sq",
//                                 "max_exp_avg_sq", "square_avg", "grad_avg", "sum") of parameter
//                                 <name>, assembled from every rank's box as the parameter is, for
//                                 each parameter that has state (one that has never been stepped
//                                 has none, and gets none back when loaded, as in PyTorch)
//   "__metadata__"                strings:
//     "format"                    "distop.checkpoint"
//     "format_version"            "2" (version 1 held SGD's state only; it is not read)
//     "epoch"                     CheckpointInfo::epoch (decimal, as every integer below)
//     "step_in_epoch"             CheckpointInfo::step_in_epoch
//     "global_step"               CheckpointInfo::global_step
//     "seed"                      CheckpointInfo::seed
//     "optimizer"                 the optimizer's name(): "SGD", "Adam", "AdamW", "RMSprop", ...
//     "optimizer.groups"          its number of parameter groups
//     "optimizer.group.<g>.params"
//                                 the names of group g's parameters, in order, as a JSON array
//     "optimizer.group.<g>.<option>"
//                                 each option of group g by torch's name (group_options(g): "lr",
//                                 "momentum", "beta1", ...; booleans 0 or 1)
//     "optimizer.<key>.<name>"    the scalar state <key> ("step") of parameter <name>
//     "scheduler.last_step"       CheckpointInfo::scheduler's step count, when it has one,
//     "scheduler.base_lr.<g>"     and its base learning rate of group g
//     "user.<key>"                each pair of CheckpointInfo::metadata
//     "distop.crc32.<tensor>"     the CRC-32 of each tensor's bytes (safetensors.hpp, checksums),
//                                 checked on every rank as the tensor is read
// Floating-point values are printed with 17 significant digits, so they read back exactly. State
// keys have no dot, so "optimizer.<key>.<name>" splits at its second dot.
//
// Names under "optimizer." are reserved: no parameter may have one.
//
// Writing. Every parameter and state tensor is assembled on parent rank 0, which writes the file
// through write_safetensors: to "checkpoint.safetensors.tmp.<pid>" in the same directory,
// fsync'ed, renamed over checkpoint.safetensors and the directory fsync'ed. A crash part way
// leaves the previous checkpoint whole and readable (and perhaps a stale *.tmp.<pid> file, which
// loading ignores and may be deleted). A parameter's state comes from the ranks that hold a part
// of it (ranks without a box may never have stepped it); that some of those ranks have state and
// others not, or different scalars, is an error.
//
// Reading. Every rank reads the file and takes its own boxes. The checks come first, agreed over
// the parent communicator: a missing file, a file that is not a safetensors file or whose header
// is not valid (truncated, bad JSON), a tensor whose bytes do not match its CRC-32 ("tensor
// '<name>' in file <path> is corrupt"), a file that is not a distop checkpoint, a checkpoint of
// another optimizer (an Adam checkpoint loaded into SGD) or other parameter groups, or of another
// model (a parameter missing from the file, a tensor the model lacks, a wrong shape or dtype), or
// state the optimizer would not accept (Optimizer::check_state_dict) raises the same
// distop::Error (op "load_checkpoint") on every rank, and then no parameter, optimizer option or
// state has changed.

#include <cstdint>
#include <optional>
#include <string>

#include "distop/io/safetensors.hpp"
#include "distop/nn/module.hpp"
#include "distop/optim/lr_scheduler.hpp"
#include "distop/optim/optimizer.hpp"
#include "distop/parallel/data_parallel.hpp"

namespace distop::io {

// Where a training loop stands, so that a resumed run continues exactly as an uninterrupted one
// would. distop's shuffling is a function of (seed, epoch) only (data::Sampler), so these numbers
// and the weights and the optimizer's (and scheduler's) state are the whole state of a training
// loop.
struct CheckpointInfo {
  std::int64_t epoch = 0;          // the epoch to continue in, counted from 0
  std::int64_t step_in_epoch = 0;  // the batches of that epoch already done
  std::int64_t global_step = 0;    // the optimizer steps done since training started
  std::uint64_t seed = 0;          // the seed of the initial weights and of the shuffling
  Metadata metadata{};             // the caller's own string pairs, saved and restored as they are
  // A learning-rate scheduler's state (LRScheduler::state()), if the loop has one; its base
  // learning rates are one per optimizer group.
  std::optional<optim::LRSchedulerState> scheduler{};
};

// The latest checkpoint of a checkpoint directory: "<dir>/checkpoint.safetensors".
std::string checkpoint_path(const std::string& dir);

// Writes the latest checkpoint of `dir` (created if missing): the model's parameters and buffers
// (every one, the non-persistent ones included), the optimizer's name, groups, options and state,
// and `info`, atomically (see above). Every optimizer parameter must be one of the model's (they
// are matched by identity, Var::same_as); a parameter that the optimizer does not update is saved
// without state. Collective over the model's parameters' parent communicator (every rank calls
// Optimizer::state_dict()); an error (a reserved or duplicate name, an unnamed optimizer
// parameter, state that differs between ranks, a scheduler state whose base learning rates are not
// one per group, a write failure) is raised on every rank as distop::Error (op
// "save_checkpoint").
template <class T>
void save_checkpoint(const std::string& dir, const nn::Module<T>& model,
                     const optim::Optimizer<T>& optimizer, const CheckpointInfo& info);
// The same for a data-parallel model: collective over every rank of every replica (a sharded
// optimizer gathers its state from the replicas); replica 0 writes the file, and its errors are
// raised on every rank.
template <class T>
void save_checkpoint(const std::string& dir, const parallel::DataParallel<T>& model,
                     const optim::Optimizer<T>& optimizer, const CheckpointInfo& info);

// Reads the latest checkpoint of `dir` and restores every parameter's and buffer's boxes and the
// optimizer's options and state (Optimizer::load_state_dict, as PyTorch's restores param_groups
// and state), and returns the CheckpointInfo it was saved with (its scheduler state for the caller
// to hand to LRScheduler::load_state). Errors as described above, on every rank, before anything
// changes. Collective over the model's parameters' parent communicator.
template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, nn::Module<T>& model,
                               optim::Optimizer<T>& optimizer);
// The same for a data-parallel model: every replica reads the file, so the replicas hold the same
// state after it. Collective over every rank of every replica.
template <class T>
CheckpointInfo load_checkpoint(const std::string& dir, parallel::DataParallel<T>& model,
                               optim::Optimizer<T>& optimizer);

}  // namespace distop::io
