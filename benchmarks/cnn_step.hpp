#pragma once
// What the benchmarks of examples/cnn's data-parallel step share (bench_data_parallel, bench_zero,
// bench_simulated): the model on one replica per rank, a fixed random batch, the training step's
// loss, and the all-reduce of the gradients' bytes alone as the raw MPI baseline.

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <distop/distop.hpp>
#include <vector>

#include "../examples/cnn/model.hpp"
#include "bench_util.hpp"

namespace distop::bench {

// The command line of a benchmark of the step: --batch, --steps, --warmup and --csv.
struct StepOptions {
  std::int64_t batch = 64;
  int steps = 20;
  int warmup = 3;
  bool csv = false;

  void add_to(CLI::App& app) {
    app.add_option("--batch", batch, "Examples per replica per step")->capture_default_str();
    app.add_option("--steps", steps, "Timed steps per mode")->capture_default_str();
    app.add_option("--warmup", warmup, "Untimed steps first, per mode")->capture_default_str();
    app.add_flag("--csv", csv, "Comma-separated output");
  }
};

// The largest of every rank's v (collective over `comm`).
inline double max_over_ranks(double v, MPI_Comm comm = MPI_COMM_WORLD) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
  return m;
}

// This rank's bytes of the model's parameters (the gradients' bytes a replica reduces).
inline std::size_t parameter_bytes(const nn::Module<float>& model) {
  std::size_t bytes = 0;
  for (const auto& p : model.parameters())
    bytes += static_cast<std::size_t>(p.value().local_numel()) * sizeof(float);
  return bytes;
}

// A fixed random batch of `batch` 1 x 28 x 28 images for a ConvNet and its labels (the data do not
// change the step's cost; the data set is not read).
struct CnnBatch {
  DistTensor<float> images;
  std::vector<std::int32_t> labels;

  CnnBatch(const examples::ConvNet& model, std::int64_t batch) : images(model.input_space(batch)) {
    nn::uniform_init(images, 7, 1.0);
    for (std::int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<std::int32_t>(i % 10));
  }

  // The step's forward pass: the model on the images, then the cross-entropy loss.
  Var<float> loss(Tape& tape, examples::ConvNet& model) const {
    auto logits = model.forward(tape, Var<float>(images));
    return loss::cross_entropy(tape, logits, labels);
  }
};

// The median over `steps` (after `warmup`) of MPI_Allreduce of `bytes` of floats alone over
// `comm`, one message, the slowest rank's time in ms (host clock): the raw baseline of the step's
// reduction.
inline double allreduce_alone_ms(std::size_t bytes, MPI_Comm comm, int warmup, int steps) {
  std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  std::vector<double> alone;
  for (int s = 0; s < warmup + steps; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT, MPI_SUM,
                  comm);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) alone.push_back(max_over_ranks(t));
  }
  return median(alone) * 1e3;
}

// The rest of a training step after the forward pass: backward through `dp`, with the gradients
// reduced over the replicas (`reduce`) or not (backward_no_sync: the compute-only step), then the
// optimizer's step and zero_grad.
template <class Optimizer>
void finish_step(parallel::DataParallel<float>& dp, Tape& tape, Var<float>& loss, bool reduce,
                 Optimizer& opt) {
  if (reduce)
    dp.backward(tape, loss);
  else
    dp.backward_no_sync(tape, loss);
  opt.step();
  opt.zero_grad();
}

}  // namespace distop::bench
