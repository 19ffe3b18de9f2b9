#pragma once
// train::fit: distop's training driver. Any model (train/model.hpp) and any loss
// (train/loss.hpp), with the optimizer, schedule, data parallelism, checkpoints, logs and
// evaluation that TrainOptions (train/options.hpp) describes. docs/models.md has a complete
// program.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "distop/data/idx.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/parallel/replicas.hpp"
#include "distop/train/loss.hpp"
#include "distop/train/model.hpp"
#include "distop/train/options.hpp"

namespace distop::train {

// What the callbacks are told; the same values on every rank.
struct StepReport {
  std::int64_t step = 0;   // steps done in all, this one included (counted from 1)
  std::int64_t epoch = 0;  // counted from 1
  double loss = 0;         // the step's loss: the mean over the replicas' losses of the step
};
struct EpochReport {
  std::int64_t epoch = 0;          // counted from 1
  double loss = 0;                 // the mean training loss per example of the epoch
  std::optional<double> metric{};  // the loss's metric over the epoch, if it has one
  double seconds = 0;              // the epoch's wall-clock time
};
struct EvaluationReport {
  std::int64_t epoch = 0;  // the epochs trained so far
  double loss = 0;         // the mean loss per example of the evaluation set
  std::optional<double> metric{};
  std::int64_t examples = 0;
};

// Called on every rank, after each step (on_step: a step's report arrives once the next step has
// computed, since its sums complete in the background; the last step's at the end of its epoch),
// after each finished epoch (on_epoch) and after each evaluation (on_evaluation). Any may be
// empty. An exception a callback throws stops the run (throw on every rank alike).
struct Callbacks {
  std::function<void(const StepReport&)> on_step{};
  std::function<void(const EpochReport&)> on_epoch{};
  std::function<void(const EvaluationReport&)> on_evaluation{};
};

// What a program tells fit beside its flags.
struct FitContext {
  // Names the program in progress output, errors and the checkpoints' metadata.
  std::string program = "distop";
  // Data parallelism: R replicas of the model (each built on replicas->model_comm()), each
  // training on its share of every global batch of options.batch_size examples; fit wraps the
  // model in a parallel::DataParallel. options.replicas must equal replicas->count(). Null: one
  // replica over `comm`.
  const parallel::Replicas* replicas = nullptr;
  // The ranks of the run, when replicas is null (else replicas->world()).
  MPI_Comm comm = MPI_COMM_WORLD;
  // Extra metadata of the --save file ("model", "dataset").
  io::Metadata save_metadata{};
  // Settings a checkpoint depends on beyond the options' and the loss's: a resumed run must
  // repeat them.
  io::Metadata checkpoint_settings{};
  Callbacks callbacks{};
};

// Trains `model` on `train` by minimising `loss` with the optimizer and schedule of `options`,
// evaluates it on `test` (when not null) after each epoch and at the end, and keeps the
// checkpoints, logs and weights the options ask for. Returns 0, or 128 + the signal's number when
// SIGTERM or SIGINT stopped the run (after a checkpoint, when options.checkpoint_dir is set).
// Collective over the run's ranks: every rank calls it with the same options (and the errors it
// raises are raised on every rank). The contract, in full, is docs/models.md's "The training
// driver"; in short:
//   - Each step's examples: data::DistributedSampler's share of a shuffled (options.seed, epoch)
//     order for this replica, options.batch_size / R of them; loss.forward() turns them into the
//     step's loss; the gradients are averaged over the replicas by DataParallel::backward.
//   - Before the first step: the options are checked (check_options), --init is loaded, --save,
//     --trace, --metrics, --loss-log and the checkpoint directory are checked writable, the
//     directory locked, and, within each replica, parameters held whole by several ranks that
//     read different examples (so nothing would average their gradients) are an Error naming the
//     parameter.
//   - A checkpoint holds the model's parameters and buffers, the optimizer's and the schedule's
//     state and the position in the data; --resume continues bit-identically, refusing settings
//     that differ from the checkpoint's (batch size, epochs, schedule, optimizer options, shuffle,
//     the loss's settings and context.checkpoint_settings).
//   - A step whose loss is not finite stops the run with an Error (unless
//     options.allow_nonfinite).
// float and double models.
template <class T>
int fit(const Model<T>& model, Loss<T>& loss, const data::Dataset& train, const data::Dataset* test,
        const TrainOptions& options, const FitContext& context = {});

// Any TrainableModel (a class derived from nn::Module<T> with input_space and forward).
template <class M, class T>
requires TrainableModel<M, T>
int fit(M& model, Loss<T>& loss, const data::Dataset& train, const data::Dataset* test,
        const TrainOptions& options, const FitContext& context = {}) {
  return fit(Model<T>(model), loss, train, test, options, context);
}

extern template int fit(const Model<float>&, Loss<float>&, const data::Dataset&,
                        const data::Dataset*, const TrainOptions&, const FitContext&);
extern template int fit(const Model<double>&, Loss<double>&, const data::Dataset&,
                        const data::Dataset*, const TrainOptions&, const FitContext&);

}  // namespace distop::train
