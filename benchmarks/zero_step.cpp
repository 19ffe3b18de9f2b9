// bench_zero: sharded optimizer state (ZeRO stages 1 and 2) on examples/cnn with Adam, one
// replica per rank: the optimizer-state bytes each rank holds, and the training step's time,
// against unsharded data parallelism in the same run.
//
//   mpiexec.mpich -n 2 build/benchmarks/bench_zero [--batch 64] [--steps 20] [--bucket-kb 25600]
//                                                  [--csv]
//
// Modes: zero0 (Adam over the whole model, DataParallel all-reducing the gradients), zero1
// (parallel::ShardedOptimizer stage 1: Adam over this replica's chunks, the gradients still
// all-gathered, the parameters all-gathered after the step) and zero2 (stage 2: no gradient
// all-gather, only the owned chunks of the gradients kept). state_bytes is the bytes of the
// optimizer's state tensors allocated on a rank after a step (the largest over the ranks), counted
// from the tensors themselves; grad_bytes the bytes of gradient storage DataParallel holds after
// the step (bucket, receive and owned-shard buffers and parameter gradients outside buckets,
// counted from the tensors: DataParallel::gradient_bytes), grad_peak the most it held during the
// last backward (DataParallel::peak_gradient_bytes: the same count, sampled at each ready
// gradient and reduction event, with the rotating full-size buffers of stage 2); step_ms the
// median over --steps steps of forward, backward with reduction, and optimizer step (the slowest
// rank's). allreduce is MPI_Allreduce of the gradients' bytes alone, measured in the same run.
// The modes' steps are interleaved. Inputs are random; the data set is not read.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <distop/distop.hpp>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cnn_step.hpp"

namespace {

using namespace distop;
using bench::max_over_ranks;

std::size_t state_bytes(const optim::OptimizerState<float>& s) {
  std::size_t bytes = 0;
  for (const auto& p : s.params)
    for (const auto& [key, t] : p.tensors)
      bytes += static_cast<std::size_t>(t.numel()) * sizeof(float);
  return bytes;
}

struct Row {
  int zero = 0;
  double state_bytes = 0;  // the largest over the ranks
  double grad_bytes = 0;   // after the step, the largest over the ranks
  double grad_peak = 0;    // during the last backward, the largest over the ranks
  double step_ms = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  bench::StepOptions cli{.steps = 20, .warmup = 3};
  CLI::App app{"Sharded optimizer state (ZeRO 1 and 2) on examples/cnn with Adam"};
  cli.add_to(app);
  double bucket_kb = 25600;
  app.add_option("--bucket-kb", bucket_kb,
                 "Bucket capacity in KiB (the first bucket at most 1 MiB)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  if (auto code = bench::parse_args(app, argc, argv)) return *code;
  const auto [batch, steps, warmup, csv] = cli;

  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  parallel::Replicas replicas(MPI_COMM_WORLD, ranks);
  examples::ConvNet shape(1, 28, 28, 1, replicas.model_comm());
  const std::size_t param_bytes = bench::parameter_bytes(shape);
  const bench::CnnBatch data(shape, batch);
  const optim::AdamOptions adam{.lr = 1e-4};
  auto make = [&](std::vector<Var<float>> p) -> std::unique_ptr<optim::Optimizer<float>> {
    return std::make_unique<optim::Adam<float>>(std::move(p), adam);
  };

  // One model, DataParallel and optimizer per mode, their steps interleaved (a round runs one step
  // of each mode), so that a busy machine slows every mode alike.
  struct Run {
    std::unique_ptr<examples::ConvNet> model;
    std::unique_ptr<parallel::DataParallel<float>> dp;
    std::unique_ptr<optim::Optimizer<float>> opt;
    parallel::ShardedOptimizer<float>* sharded = nullptr;
    std::vector<double> times;
  };
  std::vector<Run> runs(3);
  for (int zero = 0; zero < 3; ++zero) {
    Run& r = runs[static_cast<std::size_t>(zero)];
    r.model = std::make_unique<examples::ConvNet>(1, 28, 28, 1, replicas.model_comm());
    parallel::DataParallelOptions options;
    options.bucket_bytes = static_cast<std::size_t>(bucket_kb * 1024);
    options.first_bucket_bytes = std::min(options.first_bucket_bytes, options.bucket_bytes);
    r.dp = std::make_unique<parallel::DataParallel<float>>(*r.model, replicas, options);
    if (zero == 0) {
      r.opt = make(r.model->parameters());
    } else {
      auto s = std::make_unique<parallel::ShardedOptimizer<float>>(*r.dp, zero, make);
      r.sharded = s.get();
      r.opt = std::move(s);
    }
  }
  for (int s = 0; s < warmup + steps; ++s) {
    for (auto& r : runs) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      Tape tape;
      auto loss = data.loss(tape, *r.model);
      r.dp->backward(tape, loss);
      r.opt->step();
      r.opt->zero_grad();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= warmup) r.times.push_back(max_over_ranks(t));
    }
  }
  std::vector<Row> rows;
  for (int zero = 0; zero < 3; ++zero) {
    Run& r = runs[static_cast<std::size_t>(zero)];
    const std::size_t bytes =
        r.sharded ? r.sharded->state_bytes() : state_bytes(r.opt->state_dict());
    rows.push_back(Row{zero, max_over_ranks(static_cast<double>(bytes)),
                       max_over_ranks(static_cast<double>(r.dp->gradient_bytes())),
                       max_over_ranks(static_cast<double>(r.dp->peak_gradient_bytes())),
                       bench::median(r.times) * 1e3});
  }

  const double allreduce_ms =
      bench::allreduce_alone_ms(param_bytes, replicas.reduction_comm(), warmup, steps);

  if (rank != 0) return 0;
  const double unsharded = rows.front().state_bytes;
  if (csv) {
    std::printf(
        "mode,ranks,batch_per_replica,bucket_kb,param_bytes,state_bytes_per_rank,state_ratio,"
        "grad_bytes_per_rank,grad_peak_per_rank,step_ms\n");
    for (const auto& r : rows)
      std::printf("zero%d,%d,%lld,%.0f,%zu,%.0f,%.4f,%.0f,%.0f,%.4f\n", r.zero, ranks,
                  static_cast<long long>(batch), bucket_kb, param_bytes, r.state_bytes,
                  r.state_bytes / unsharded, r.grad_bytes, r.grad_peak, r.step_ms);
    std::printf("allreduce,%d,%lld,%.0f,%zu,0,0,0,0,%.4f\n", ranks, static_cast<long long>(batch),
                bucket_kb, param_bytes, allreduce_ms);
    return 0;
  }
  std::printf(
      "examples/cnn with Adam, %d replicas, batch %lld per replica, %zu parameter bytes, buckets "
      "%.0f KiB\n",
      ranks, static_cast<long long>(batch), param_bytes, bucket_kb);
  std::printf("%-10s %18s %12s %17s %17s %9s\n", "mode", "state_bytes/rank", "vs unsharded",
              "grad_bytes/rank", "grad_peak/rank", "step_ms");
  for (const auto& r : rows)
    std::printf("zero%-6d %18.0f %12.3f %17.0f %17.0f %9.3f\n", r.zero, r.state_bytes,
                r.state_bytes / unsharded, r.grad_bytes, r.grad_peak, r.step_ms);
  std::printf("%-10s %18s %12s %17s %17s %9.3f\n", "allreduce", "-", "-", "-", "-", allreduce_ms);
  return 0;
}
