#pragma once
// The settings of distop's training driver (train::fit) and the optimizer and learning-rate
// schedule they describe. The command-line flags that fill them are in train/cli.hpp (the
// distop::cli library).

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/data/idx.hpp"
#include "distop/optim/lr_scheduler.hpp"
#include "distop/optim/optimizer.hpp"

namespace distop::train {

struct TrainOptions {
  std::string data = data::kFashionMnistDir;
  int epochs = 5;
  std::int64_t steps = 0;  // stop after this many steps in all; 0: no limit
  std::int64_t batch_size = 32;
  std::uint64_t seed = 1;  // of the initial weights and of the shuffling
  bool no_shuffle = false;
  // Data parallelism: the ranks as this many replicas of the model (each over ranks / replicas
  // ranks), batch_size being the global batch. The program lays them out (parallel::Replicas)
  // and builds its model on its replica's ranks.
  int replicas = 1;
  // Sharded optimizer state over the replicas (parallel::ShardedOptimizer): ZeRO stage 1 or 2, or
  // 0 for none. Allowed at one replica (the whole state on it; a checkpoint loads either way).
  int zero = 0;

  // The optimizer: "sgd", "adam", "adamw", "rmsprop" or "adagrad", with torch.optim's definitions
  // and defaults. An option left unset takes the optimizer's default; one that the optimizer does
  // not have is an error (check_options).
  std::string optimizer = "sgd";
  double lr = 0.01;
  std::optional<double> momentum;              // sgd (default: default_sgd_momentum), rmsprop (0)
  double default_sgd_momentum = 0.9;           // a program's own default for SGD
  std::optional<double> weight_decay;          // every optimizer (0; AdamW 0.01)
  std::optional<std::array<double, 2>> betas;  // adam, adamw (0.9, 0.999)
  std::optional<double> eps;                   // adam, adamw, rmsprop (1e-8), adagrad (1e-10)
  std::optional<double> alpha;                 // rmsprop (0.99)
  bool nesterov = false;                       // sgd
  bool amsgrad = false;                        // adam, adamw
  bool centered = false;                       // rmsprop

  // The learning rate of step t of the T = epochs x (steps per epoch) steps of the run: "constant",
  // "cosine" (annealed to 0 over T, after the warm-up) or "step" (times lr_gamma every
  // lr_step_size steps), after warmup_steps steps of linear warm-up from lr / 3 (0: none).
  std::string lr_schedule = "constant";
  std::int64_t lr_step_size = 0;
  double lr_gamma = 0.1;
  std::int64_t warmup_steps = 0;

  std::string init;      // initial weights: a safetensors state_dict
  std::string save;      // the trained weights, written at the end
  std::string loss_log;  // each step's loss (rank 0)
  std::string metrics;   // per-epoch loss, accuracies and seconds as CSV (rank 0)
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // steps; 0: at the end of each epoch (and at a --steps stop)
  bool resume = false;
  bool quiet = false;
  // A step whose loss is NaN or infinite: by default an error naming the step (the last
  // checkpoint left as it was); with this set, training goes on.
  bool allow_nonfinite = false;
  std::string trace;     // a Chrome trace event JSON timeline of the steps (core/trace.hpp)
  bool profile = false;  // print a per-step breakdown of the timers at the end (train/profile.hpp)
};

// Throws distop::Error (op `program`) naming the first setting that is out of range (the
// optimizer's as torch.optim refuses them: --momentum, --weight-decay, --eps, --alpha below 0,
// --betas outside [0, 1); a negative --lr-gamma), that does not apply to the chosen optimizer
// (--nesterov with adam, --betas with sgd, ...) or to the schedule (--lr-step-size without
// --lr-schedule step), or that conflicts with another (--resume without --checkpoint-dir, --resume
// with --init). Values torch.optim accepts that cannot be meant (--momentum above 1, --alpha of 1
// or more) are warned of once, on rank 0 (optim::warn_once), naming the flag. Not collective:
// every rank passes the same settings and reaches the same verdict.
void check_options(const TrainOptions& o, const std::string& program);

// Throws distop::Error (op `program`) "<setting> needs N bytes per rank, more than the M bytes
// of this machine's memory" when `bytes` exceeds the physical memory (sysconf), so that a model or
// batch too large for memory is an error naming its flag before anything is allocated rather
// than a std::bad_alloc without context or a rank killed by the kernel. Local.
void check_fits_in_memory(const std::string& program, const std::string& setting, double bytes);

// The optimizer the settings describe, over `parameters` (one group). float and double.
template <class T>
std::unique_ptr<optim::Optimizer<T>> make_optimizer(const TrainOptions& o,
                                                    std::vector<Var<T>> parameters);

// The schedule the settings describe, for a run of `total_steps` steps.
optim::LRSchedule make_schedule(const TrainOptions& o, std::int64_t total_steps);

}  // namespace distop::train
