#pragma once
// The training driver's command-line flags (CLI11) and a main() for training programs.

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "distop/train/options.hpp"

namespace distop::train {

// Adds the driver's flags to `app`, writing into `o` (whose values at this call are the defaults
// shown by --help): --data --epochs --steps --batch-size --seed --no-shuffle --optimizer --lr
// --momentum --weight-decay --betas B1,B2 --eps --alpha --nesterov --amsgrad --centered
// --lr-schedule --lr-step-size --lr-gamma --warmup-steps --init --save --loss-log --metrics
// --checkpoint-dir --checkpoint-every --resume --quiet --allow-nonfinite --trace --profile.
// Integer flags are plain
// decimal numbers within their type's range (no sign for unsigned ones: --seed -1 is an error),
// real flags finite numbers; an error names the flag. Flags left out keep the optimizer's own
// defaults (TrainOptions); check_options, which train::fit runs, rejects a flag that does not
// apply to the chosen optimizer.
void add_training_options(CLI::App& app, TrainOptions& o);

// main() of a training program: sets up distop (Environment: MPI, Kokkos, BLAS threads), parses
// the flags on every rank (so every rank leaves alike on a bad flag: --help and its output on rank
// 0, exit status 2 for a bad flag, "<program>: error: <flag>: ..."), checks that every rank was
// given the same flags (a hash of each option's values, compared in one all-reduce; a difference
// is "<program>: error: <flag> differs between the ranks", exit status 2) and runs `run`. An
// error raised on every rank (as distop's are) becomes a message from rank 0 and exit status 1;
// one raised on some ranks only aborts the job with each such rank's message
// (Environment::report_error).
int run_main(int argc, char** argv, CLI::App& app, const std::string& program,
             const std::function<int()>& run);

// run_main's parsing and agreement of the flags, for a program with a main() of its own (MPI
// initialised, by an Environment): parses `app` on every rank of MPI_COMM_WORLD, agrees the
// outcome and compares every option's values across the ranks, printing as run_main does. Returns
// the exit status to end with (0 after --help, 2 for a bad flag or one that differs between the
// ranks), or std::nullopt when every rank parsed the same flags. Collective over MPI_COMM_WORLD.
std::optional<int> parse_agreed(int argc, char** argv, CLI::App& app, const std::string& program);

}  // namespace distop::train
