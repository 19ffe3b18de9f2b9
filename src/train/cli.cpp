#include "distop/train/cli.hpp"

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "distop/core/environment.hpp"

namespace distop::train {

void add_training_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data, "Directory of the Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the training set")->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps in all (0: no limit)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Examples per step")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial weights and the shuffling")
      ->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "Visit the training set in file order");
  app.add_option("--replicas", o.replicas,
                 "Data parallelism: the ranks as this many replicas of the model, each taking "
                 "batch-size / replicas examples of every step")
      ->capture_default_str();
  app.add_option("--zero", o.zero,
                 "Shard the optimizer state over the replicas: ZeRO stage 1 (state) or 2 (state, "
                 "gradients reduce-scattered only); 0: not sharded")
      ->capture_default_str();

  app.add_option("--optimizer", o.optimizer, "sgd, adam, adamw, rmsprop or adagrad (torch.optim's)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop", "adagrad"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate (of step 0 after the warm-up)")
      ->capture_default_str();
  // Optional settings: set only when given, so that the optimizer's own default applies otherwise
  // and a flag that does not apply to it can be told from one left out.
  auto optional = [&app](const char* flag, std::optional<double>& target, std::string help) {
    app.add_option_function<double>(
        flag, [&target](const double& v) { target = v; }, std::move(help));
  };
  char sgd_default[32];
  std::snprintf(sgd_default, sizeof sgd_default, "%g", o.default_sgd_momentum);
  optional("--momentum", o.momentum,
           std::string("Momentum: sgd (default ") + sgd_default + "), rmsprop (default 0)");
  optional("--weight-decay", o.weight_decay,
           "Weight decay: L2, or decoupled for adamw (default 0.01; the others 0)");
  app.add_option_function<std::vector<double>>(
         "--betas",
         [&o](const std::vector<double>& v) {
           o.betas = std::array<double, 2>{v[0], v[1]};
         },
         "adam, adamw: B1,B2 (default 0.9,0.999)")
      ->delimiter(',')
      ->expected(2);
  optional("--eps", o.eps, "adam, adamw, rmsprop (default 1e-8), adagrad (default 1e-10)");
  optional("--alpha", o.alpha, "rmsprop: smoothing constant (default 0.99)");
  app.add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum");
  app.add_flag("--amsgrad", o.amsgrad, "adam, adamw: AMSGrad");
  app.add_flag("--centered", o.centered, "rmsprop: centered");
  app.add_option("--lr-schedule", o.lr_schedule,
                 "constant; cosine: annealed to 0 over the run's steps; step: times --lr-gamma "
                 "every --lr-step-size steps")
      ->check(CLI::IsMember({"constant", "cosine", "step"}))
      ->capture_default_str();
  app.add_option("--lr-step-size", o.lr_step_size, "Steps between decays of --lr-schedule step");
  app.add_option("--lr-gamma", o.lr_gamma, "Decay factor of --lr-schedule step")
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps,
                 "Linear warm-up from lr/3 over this many steps before the schedule")
      ->capture_default_str();

  app.add_option("--init", o.init, "Initial weights (safetensors state_dict, PyTorch names)");
  app.add_option("--save", o.save, "Write the trained weights here (safetensors state_dict)");
  app.add_option("--loss-log", o.loss_log, "Write each step's loss here (rank 0)");
  app.add_option("--metrics", o.metrics,
                 "Write per-epoch loss, accuracies and time here as CSV (rank 0; default "
                 "<checkpoint-dir>/metrics.csv when --checkpoint-dir is given)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Keep the latest checkpoint (weights, optimizer state, position) here");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every this many steps (0: only at the end of each epoch)")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue from the checkpoint in --checkpoint-dir");
  app.add_flag("--quiet", o.quiet, "No progress output");
}

int run_main(int argc, char** argv, CLI::App& app, const std::string& program,
             const std::function<int()>& run) {
  Environment env(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  try {
    return run();
  } catch (const std::exception& e) {
    return env.report_error(e, program.c_str());
  }
}

}  // namespace distop::train
