// bench_data_parallel: one data-parallel training step of examples/cnn (forward, backward with
// gradient averaging, SGD update) at a batch per replica, one replica per rank, and how much of
// the gradient all-reduce the overlap hides.
//
//   mpiexec.mpich -n 2 build/benchmarks/bench_data_parallel [--batch 64] [--steps 30] [--csv]
//
// Modes, each timed as the median over --steps steps (a step's time is the slowest rank's):
//   compute      backward without any reduction (GradientReducer::backward_no_sync): the floor
//   after        every bucket's all-reduce started after backward (overlap off), then waited
//   overlap      buckets of the default caps (1 MiB first, 25 MiB others), started during backward
//   overlap-S    the same with S KiB buckets (a sweep), and
//   layers       one reduction per layer (Laanait et al.'s grouping), started during backward
// and, measured in the same run, the MPI_Allreduce of the same bytes as one message ("allreduce").
// exposed = step - compute: the communication the step still waits for; hidden = 1 - exposed /
// allreduce. wait is the time backward() spent waiting after the replay. Inputs are random; the
// data set is not read.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <distop/distop.hpp>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cnn_step.hpp"

namespace {

using namespace distop;
using bench::max_over_ranks;

struct Row {
  std::string mode;
  double step_ms = 0;
  double wait_ms = 0;
  std::size_t buckets = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  bench::StepOptions cli{.steps = 30, .warmup = 5};
  CLI::App app{"Data-parallel training step of examples/cnn: compute, reduction, overlap"};
  cli.add_to(app);
  if (auto code = bench::parse_args(app, argc, argv)) return *code;
  const auto [batch, steps, warmup, csv] = cli;

  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  parallel::Replicas replicas(MPI_COMM_WORLD, ranks);
  examples::ConvNet model(1, 28, 28, 1, replicas.model_comm());
  const std::size_t grad_bytes = bench::parameter_bytes(model);
  const bench::CnnBatch data(model, batch);
  optim::SGD<float> opt(model.parameters(), {.lr = 1e-4, .momentum = 0.9});

  auto measure = [&](const std::string& mode, parallel::ReducerOptions options, bool reduce) {
    parallel::GradientReducer<float> reducer(model, replicas, options);
    std::vector<double> times, waits;
    for (int s = 0; s < warmup + steps; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      Tape tape;
      auto loss = data.loss(tape, model);
      if (reduce)
        reducer.backward(tape, loss);
      else
        reducer.backward_no_sync(tape, loss);
      opt.step();
      opt.zero_grad();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= warmup) {
        times.push_back(max_over_ranks(t));
        waits.push_back(max_over_ranks(reduce ? reducer.last_wait_seconds() : 0.0));
      }
    }
    return Row{mode, bench::median(times) * 1e3, bench::median(waits) * 1e3,
               reducer.buckets().size()};
  };

  std::vector<Row> rows;
  rows.push_back(measure("compute", {}, false));
  rows.push_back(measure("after", {.overlap = false}, true));
  rows.push_back(measure("overlap", {}, true));
  for (const std::size_t kib : {64, 256, 1024, 4096})
    rows.push_back(measure("overlap-" + std::to_string(kib),
                           {.first_bucket_bytes = kib << 10, .bucket_bytes = kib << 10}, true));
  rows.push_back(measure("layers", {.grouping = parallel::ReducerOptions::Grouping::layers}, true));

  // The all-reduce of the same bytes alone, one message.
  const double allreduce_ms =
      bench::allreduce_alone_ms(grad_bytes, replicas.reduction_comm(), warmup, steps);
  const double compute_ms = rows.front().step_ms;

  if (rank != 0) return 0;
  if (csv) {
    std::printf("mode,ranks,batch_per_replica,buckets,step_ms,wait_ms,exposed_ms,hidden\n");
  } else {
    std::printf(
        "# bench_data_parallel: examples/cnn, %d replicas (one per rank), batch %lld per "
        "replica, %.2f MiB of gradients; all-reduce of those bytes alone: %.3f ms\n",
        ranks, static_cast<long long>(batch), static_cast<double>(grad_bytes) / (1 << 20),
        allreduce_ms);
    std::printf("%-14s %7s %9s %9s %11s %7s\n", "mode", "buckets", "step_ms", "wait_ms",
                "exposed_ms", "hidden");
  }
  for (const auto& r : rows) {
    const double exposed = r.step_ms - compute_ms;
    const double hidden = r.mode == "compute" || allreduce_ms <= 0 ? 0 : 1 - exposed / allreduce_ms;
    if (csv)
      std::printf("%s,%d,%lld,%zu,%.4f,%.4f,%.4f,%.3f\n", r.mode.c_str(), ranks,
                  static_cast<long long>(batch), r.buckets, r.step_ms, r.wait_ms, exposed, hidden);
    else
      std::printf("%-14s %7zu %9.3f %9.3f %11.3f %7.2f\n", r.mode.c_str(), r.buckets, r.step_ms,
                  r.wait_ms, exposed, hidden);
  }
  if (csv)
    std::printf("allreduce,%d,%lld,1,%.4f,0,0,0\n", ranks, static_cast<long long>(batch),
                allreduce_ms);
  return 0;
}
