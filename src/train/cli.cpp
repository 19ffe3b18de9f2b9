#include "distop/train/cli.hpp"

#include <mpi.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "distop/comm/mpi.hpp"
#include "distop/core/environment.hpp"

namespace distop::train {

namespace {

// Strict integers: plain decimal digits (a '-' only for signed types) within Int's range,
// rewritten to their canonical form (CLI11 would read "010" as octal, "-1" as 2^64 - 1 for an
// unsigned setting and clamp values beyond 64 bits).
template <class Int>
CLI::Validator decimal() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        Int v{};
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range)
          return text + " is out of range [" + std::to_string(std::numeric_limits<Int>::min()) +
                 ", " + std::to_string(std::numeric_limits<Int>::max()) + "]";
        if (text.empty() || ec != std::errc() || ptr != end)
          return "'" + text + "' is not " +
                 (std::numeric_limits<Int>::is_signed ? "an integer" : "a non-negative integer");
        text = std::to_string(v);
        return std::string();
      },
      std::numeric_limits<Int>::is_signed ? "INT" : "UINT");
}

// Strict reals: a whole decimal number, finite (no "nan", "inf", or 1e999).
CLI::Validator finite_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        if (text.empty() || end != begin + text.size()) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return text + " is not a finite number";
        return std::string();
      },
      "REAL");
}

}  // namespace

void add_training_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data, "Directory of the Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the training set")
      ->transform(decimal<int>())
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps in all (0: no limit)")
      ->transform(decimal<std::int64_t>())
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Examples per step")
      ->transform(decimal<std::int64_t>())
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial weights and the shuffling")
      ->transform(decimal<std::uint64_t>())
      ->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "Visit the training set in file order");
  app.add_option("--replicas", o.replicas,
                 "Data parallelism: the ranks as this many replicas of the model, each taking "
                 "batch-size / replicas examples of every step")
      ->transform(decimal<int>())
      ->capture_default_str();
  app.add_option("--zero", o.zero,
                 "Shard the optimizer state over the replicas: ZeRO stage 1 (state) or 2 (state, "
                 "gradients reduce-scattered only); 0: not sharded")
      ->transform(decimal<int>())
      ->capture_default_str();

  app.add_option("--optimizer", o.optimizer, "sgd, adam, adamw, rmsprop or adagrad (torch.optim's)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop", "adagrad"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate (of step 0 after the warm-up)")
      ->transform(finite_real())
      ->capture_default_str();
  // Optional settings: set only when given, so that the optimizer's own default applies otherwise
  // and a flag that does not apply to it can be told from one left out.
  auto optional = [&app](const char* flag, std::optional<double>& target, std::string help) {
    app.add_option_function<double>(
           flag, [&target](const double& v) { target = v; }, std::move(help))
        ->transform(finite_real());
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
      ->expected(2)
      ->transform(finite_real());
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
  app.add_option("--lr-step-size", o.lr_step_size, "Steps between decays of --lr-schedule step")
      ->transform(decimal<std::int64_t>());
  app.add_option("--lr-gamma", o.lr_gamma, "Decay factor of --lr-schedule step")
      ->transform(finite_real())
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps,
                 "Linear warm-up from lr/3 over this many steps before the schedule")
      ->transform(decimal<std::int64_t>())
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
      ->transform(decimal<std::int64_t>())
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue from the checkpoint in --checkpoint-dir");
  app.add_flag("--quiet", o.quiet, "No progress output");
  app.add_flag("--allow-nonfinite", o.allow_nonfinite,
               "Go on training after a step whose loss is NaN or infinite (by default such a step "
               "stops the run with an error, leaving the last checkpoint as it was)");
  app.add_option("--trace", o.trace,
                 "Write a timeline of the training steps here (Chrome trace event JSON, one track "
                 "per rank: open it in ui.perfetto.dev or chrome://tracing)");
  app.add_flag("--profile", o.profile,
               "Print a per-step breakdown of the training time (phases, operators, waits) at the "
               "end");
}

namespace {

// Every rank's flags must be the same: a launch that gives ranks different flags would hang
// (--steps), cut messages short (--batch-size) or train with different settings. Compares a hash
// of each option's given values (one all-reduce) and returns "" or the first differing flag.
std::string first_differing_option(const CLI::App& app) {
  std::vector<const CLI::Option*> options = app.get_options();
  std::vector<std::uint64_t> h;  // per option: its hash and its complement, so one MAX gives both
  h.reserve(2 * options.size() + 2);
  const auto add = [&h](std::uint64_t v) {
    h.push_back(v);
    h.push_back(~v);
  };
  add(options.size());
  for (const CLI::Option* opt : options) {
    std::string text = opt->get_name() + "=" + std::to_string(opt->count());
    for (const auto& r : opt->results()) text += "\x1f" + r;
    add(std::hash<std::string>{}(text));
  }
  std::vector<std::uint64_t> max(h.size());
  DISTOP_MPI_CHECK(MPI_Allreduce(h.data(), max.data(), static_cast<int>(h.size()), MPI_UINT64_T,
                                 MPI_MAX, MPI_COMM_WORLD),
                   "run_main");
  for (std::size_t i = 0; i < h.size(); i += 2) {
    if (max[i] == ~max[i + 1]) continue;  // the same on every rank
    if (i == 0) return "the set of options";
    return options[i / 2 - 1]->get_name();
  }
  return std::string();
}

}  // namespace

std::optional<int> parse_agreed(int argc, char** argv, CLI::App& app, const std::string& program) {
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank), program);
  // Flag errors name the program: "<program>: error: --seed: ...", exit status 2.
  app.failure_message([program](const CLI::App* a, const CLI::Error& e) {
    return program + ": error: " + CLI::FailureMessage::simple(a, e);
  });
  // Every rank parses; the outcome is agreed, so that a flag that fails on some ranks only (a
  // launch giving ranks different flags) does not leave the others waiting.
  int status[2] = {-1, -1};  // this rank's outcome (-1 parsed, else its exit status); rank 0's
  std::string message;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    status[0] = e.get_exit_code() == 0 ? 0 : 2;
    if (rank == 0) {
      status[0] = app.exit(e) == 0 ? 0 : 2;
    } else {
      message = e.what();
    }
  }
  if (rank == 0) status[1] = status[0];
  int agreed[2] = {-1, -1};
  DISTOP_MPI_CHECK(MPI_Allreduce(status, agreed, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD), program);
  if (agreed[0] >= 0) {
    // Rank 0 has spoken (app.exit); another rank that failed alone says why.
    if (agreed[1] < 0 && status[0] > 0)
      std::fprintf(stderr, "%s: error: rank %d: %s (the ranks were given different flags?)\n",
                   program.c_str(), rank, message.c_str());
    return agreed[0];
  }
  const std::string differing = first_differing_option(app);
  if (!differing.empty()) {
    if (rank == 0)
      std::fprintf(stderr,
                   "%s: error: %s differs between the ranks: every rank must be started with the "
                   "same flags\n",
                   program.c_str(), differing.c_str());
    return 2;
  }
  return std::nullopt;
}

int run_main(int argc, char** argv, CLI::App& app, const std::string& program,
             const std::function<int()>& run) {
  Environment env(argc, argv);
  if (const auto status = parse_agreed(argc, argv, app, program)) return *status;
  try {
    return run();
  } catch (const std::exception& e) {
    return env.report_error(e, program.c_str());
  }
}

}  // namespace distop::train
