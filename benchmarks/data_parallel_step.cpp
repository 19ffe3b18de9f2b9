// bench_data_parallel: one data-parallel training step of examples/cnn (forward, backward with
// gradient averaging, SGD update) at a batch per replica, one replica per rank, and how much of
// the gradient all-reduce the overlap hides.
//
//   mpiexec.mpich -n 2 build/benchmarks/bench_data_parallel [--batch 64] [--steps 30] [--csv]
//
// Modes, each timed as the median over --steps steps (a step's time is the slowest rank's), taking
// turns in blocks of 5 steps with the order rotated every round (after --warmup steps of the
// first mode; each block builds its parallel::DataParallel and runs 2 untimed steps first):
//   compute      backward without any reduction (DataParallel::backward_no_sync): the floor
//   after        every bucket's all-reduce started after backward (overlap off), then waited
//   overlap      buckets of the default caps (1 MiB first, 25 MiB others), started during backward
//   overlap-S    the same with S KiB buckets (a sweep), and
//   layers       one reduction per layer (Laanait et al.'s grouping), started during backward
// and, measured in the same run, the MPI_Allreduce of the same bytes as one message ("allreduce").
// exposed = step - compute: the communication the step still exposes. It splits into
//   wait         what backward() waited for after the replay (DataParallel::last_wait_seconds),
//   cpu          the reduction's CPU work outside that wait: the time after the forward pass
//                (backward, optimizer step, zero_grad) less the wait, against the compute mode's
//                (the ready hooks packing and starting buckets, progress calls during the replay,
//                the replica-order sum and the unpacking run on the computing cores),
// and the rest (forward-pass differences, noise). Hidden fractions: hid_after = 1 - exposed /
// exposed(after), of what the non-overlapped mode exposes, what a mode hides; hid_ar = 1 -
// exposed / allreduce, against the all-reduce of the same bytes alone. Each column is a median
// over the steps (per step the slowest rank's step, and that rank's wait and CPU work). Inputs are
// random; the data set is not read.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <distop/distop.hpp>
#include <string>
#include <utility>
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
  double tail_work_ms = 0;  // after the forward pass, less the wait
  std::size_t buckets = 0;
};

// The rank with the largest `v` over MPI_COMM_WORLD (the lowest such rank on ties).
int slowest_rank(double v) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  struct {
    double value;
    int rank;
  } in{v, rank}, out{};
  MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  return out.rank;
}

// `v` as rank `owner` has it, on every rank.
double value_of_rank(double v, int owner) {
  MPI_Bcast(&v, 1, MPI_DOUBLE, owner, MPI_COMM_WORLD);
  return v;
}

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

  // The modes take turns, in blocks of kBlock timed steps, the order rotated every round, so that
  // the shared machine's drift falls on every mode alike. A parameter has one ready hook, so one
  // DataParallel at a time: each block builds its mode's (outside the timed steps) and runs
  // kSettle untimed steps first, the first of which rebuilds the buckets in the order the
  // gradients became ready, the second the first with the rebuilt buckets.
  struct Mode {
    Mode(std::string n, parallel::DataParallelOptions o, bool r)
        : name(std::move(n)), options(o), reduce(r) {}
    std::string name;
    parallel::DataParallelOptions options;
    bool reduce;
    std::vector<double> times, waits, tail_work;
    std::size_t buckets = 0;
  };
  std::vector<Mode> modes;
  modes.emplace_back("compute", parallel::DataParallelOptions{}, false);
  modes.emplace_back("after", parallel::DataParallelOptions{.overlap = false}, true);
  modes.emplace_back("overlap", parallel::DataParallelOptions{}, true);
  for (const std::size_t kib : {64, 256, 1024, 4096})
    modes.emplace_back(
        "overlap-" + std::to_string(kib),
        parallel::DataParallelOptions{.first_bucket_bytes = kib << 10, .bucket_bytes = kib << 10},
        true);
  modes.emplace_back(
      "layers",
      parallel::DataParallelOptions{.grouping = parallel::DataParallelOptions::Grouping::layers},
      true);

  // One step; returns the seconds after the forward pass (backward, optimizer step, zero_grad).
  auto step = [&](parallel::DataParallel<float>& dp, bool reduce) {
    Tape tape;
    auto loss = data.loss(tape, model);
    const auto t0 = std::chrono::steady_clock::now();
    bench::finish_step(dp, tape, loss, reduce, opt);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  constexpr int kBlock = 5, kSettle = 2;
  {
    parallel::DataParallel<float> dp(model, replicas, modes.front().options);
    for (int s = 0; s < warmup; ++s) step(dp, false);
  }
  const int rounds = (steps + kBlock - 1) / kBlock;
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < modes.size(); ++k) {
      Mode& m = modes[(k + static_cast<std::size_t>(round)) % modes.size()];
      parallel::DataParallel<float> dp(model, replicas, m.options);
      for (int s = 0; s < kSettle; ++s) step(dp, m.reduce);
      for (int s = 0; s < kBlock && static_cast<int>(m.times.size()) < steps; ++s) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        const double tail = step(dp, m.reduce);
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double wait = m.reduce ? dp.last_wait_seconds() : 0.0;
        // The step's time is the slowest rank's; its wait and CPU work are that rank's too (a
        // faster rank's wait includes waiting for the slower one's compute).
        const int slowest = slowest_rank(t);
        m.times.push_back(max_over_ranks(t));
        m.waits.push_back(value_of_rank(wait, slowest));
        m.tail_work.push_back(value_of_rank(tail - wait, slowest));
      }
      m.buckets = dp.buckets().size();
    }
  }
  std::vector<Row> rows;
  for (const Mode& m : modes)
    rows.push_back(Row{m.name, bench::median(m.times) * 1e3, bench::median(m.waits) * 1e3,
                       bench::median(m.tail_work) * 1e3, m.buckets});

  // The all-reduce of the same bytes alone, one message.
  const double allreduce_ms =
      bench::allreduce_alone_ms(grad_bytes, replicas.reduction_comm(), warmup, steps);
  const double compute_ms = rows.front().step_ms;
  const double compute_tail_ms = rows.front().tail_work_ms;
  const double after_exposed_ms = rows[1].step_ms - compute_ms;

  if (rank != 0) return 0;
  if (csv) {
    std::printf(
        "mode,ranks,batch_per_replica,buckets,step_ms,exposed_ms,cpu_ms,wait_ms,hid_after,"
        "hid_ar\n");
  } else {
    std::printf(
        "# bench_data_parallel: examples/cnn, %d replicas (one per rank), batch %lld per "
        "replica, %.2f MiB of gradients; all-reduce of those bytes alone: %.3f ms\n",
        ranks, static_cast<long long>(batch), static_cast<double>(grad_bytes) / (1 << 20),
        allreduce_ms);
    std::printf(
        "# exposed = step - compute = cpu (reduction's CPU work outside the wait) + wait "
        "+ rest; hid_after = 1 - exposed/exposed(after); hid_ar = 1 - exposed/allreduce\n");
    std::printf("%-14s %7s %9s %11s %8s %8s %9s %7s\n", "mode", "buckets", "step_ms", "exposed_ms",
                "cpu_ms", "wait_ms", "hid_after", "hid_ar");
  }
  for (const auto& r : rows) {
    const bool reduces = r.mode != "compute";
    const double exposed = r.step_ms - compute_ms;
    const double cpu = r.tail_work_ms - compute_tail_ms;
    const double hid_after = !reduces || after_exposed_ms <= 0 ? 0 : 1 - exposed / after_exposed_ms;
    const double hid_ar = !reduces || allreduce_ms <= 0 ? 0 : 1 - exposed / allreduce_ms;
    if (csv)
      std::printf("%s,%d,%lld,%zu,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f\n", r.mode.c_str(), ranks,
                  static_cast<long long>(batch), r.buckets, r.step_ms, exposed, cpu, r.wait_ms,
                  hid_after, hid_ar);
    else
      std::printf("%-14s %7zu %9.3f %11.3f %8.3f %8.3f %9.2f %7.2f\n", r.mode.c_str(), r.buckets,
                  r.step_ms, exposed, cpu, r.wait_ms, hid_after, hid_ar);
  }
  if (csv)
    std::printf("allreduce,%d,%lld,1,%.4f,0,0,0,0,0\n", ranks, static_cast<long long>(batch),
                allreduce_ms);
  return 0;
}
