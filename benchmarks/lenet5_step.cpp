// bench_lenet5: one LeNet-5 training step (forward, backward, SGD update) of the example model,
// spatially partitioned as the example runs it, and where the time goes.
//
//   mpiexec.mpich -n 2 build/benchmarks/bench_lenet5 [--batch 64] [--steps 200] [--csv]
//                                                    [--conv-method automatic|im2col|bands|direct]
//
// Each rank times its steps with steady_clock after a barrier; a step's time is the slowest
// rank's. After --warmup untimed steps the median of --steps steps is reported, with the
// breakdown from distop's own timers (core/timers.hpp): the halo exchanges, the broadcasts and
// sum-reduces (parameters of the convolutions, inputs and outputs of the fully connected layers),
// the repartition to the fully connected layers, forward and adjoint together, and the rest of the
// step, local compute, as the difference. Breakdown columns are the mean per step on the slowest
// rank of each column. Inputs are random; the data set is not read.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <distop/distop.hpp>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "model.hpp"

namespace {

using namespace distop;

// The category of a timer name: halo, bcast (Broadcast or SumReduce), repart, or none.
const char* category(const std::string& name) {
  const auto base = name.substr(0, name.find('.'));
  if (base == "HaloExchange") return "halo";
  if (base == "Broadcast" || base == "SumReduce") return "bcast";
  if (base == "Repartition") return "repart";
  return nullptr;
}

double max_over_ranks(double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  std::int64_t batch = 64;
  int steps = 200;
  int warmup = 20;
  bool csv = false;
  bool detail = false;
  std::string method = "automatic";
  CLI::App app{"LeNet-5 training step time and breakdown (distop benchmark)"};
  app.add_option("--batch", batch, "Examples per step")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  app.add_flag("--csv", csv, "Comma-separated output");
  app.add_flag("--detail", detail, "Also list every timed operation (rank 0's ms per step)");
  app.add_option("--conv-method", method,
                 "How the host convolution kernels compute (kernels::ConvMethod)")
      ->check(CLI::IsMember({"automatic", "im2col", "bands", "direct"}))
      ->capture_default_str();
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  kernels::set_conv_method(method == "im2col"   ? kernels::ConvMethod::im2col
                           : method == "bands"  ? kernels::ConvMethod::bands
                           : method == "direct" ? kernels::ConvMethod::direct
                                                : kernels::ConvMethod::automatic);

  examples::LeNet5 model(1);
  const auto space = model.input_space(batch);
  DistTensor<float> x(space);
  nn::uniform_init(x, 7, 0.5);
  std::vector<std::int32_t> labels;
  if (model.holds_output())
    for (std::int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<std::int32_t>(i % 10));
  optim::SGD<float> opt(model.parameters(), {0.01, 0.9, 0, 0, false});
  auto step = [&] {
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    auto loss = loss::cross_entropy(tape, logits, labels);
    backward(tape, loss);
    opt.step();
    opt.zero_grad();
  };
  for (int i = 0; i < warmup; ++i) step();

  timers::reset();
  timers::enable(true);
  std::vector<double> times;
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = bench::time_one(step);
    total += t;
    times.push_back(max_over_ranks(t));
  }
  timers::enable(false);
  double parts[3] = {0, 0, 0};  // halo, bcast, repart
  const auto snapshot = timers::snapshot();
  for (const auto& [name, e] : snapshot) {
    const char* c = category(name);
    if (!c) continue;
    const int k = std::string(c) == "halo" ? 0 : std::string(c) == "bcast" ? 1 : 2;
    parts[k] += e.seconds;
  }
  const double per = 1e3 / steps;
  const double comm = (parts[0] + parts[1] + parts[2]) * per;
  const double compute = max_over_ranks(total * per - comm);
  const double halo = max_over_ranks(parts[0] * per);
  const double bcast = max_over_ranks(parts[1] * per);
  const double repart = max_over_ranks(parts[2] * per);
  const double med = bench::median(times) * 1e3;
  std::sort(times.begin(), times.end());
  const double p90 =
      times[static_cast<std::size_t>(0.9 * static_cast<double>(times.size() - 1))] * 1e3;
  if (rank != 0) return 0;
  if (csv) {
    std::printf(
        "ranks,batch,median_ms,p90_ms,samples_per_s,compute_ms,halo_ms,bcast_reduce_ms,"
        "repartition_ms\n%d,%lld,%.4f,%.4f,%.0f,%.4f,%.4f,%.4f,%.4f\n",
        ranks, static_cast<long long>(batch), med, p90, static_cast<double>(batch) / med * 1e3,
        compute, halo, bcast, repart);
    return 0;
  }
  std::printf(
      "# LeNet-5 training step, batch %lld, %d rank%s, %d timed steps (median; breakdown: "
      "mean per step, slowest rank)\n# %s\n",
      static_cast<long long>(batch), ranks, ranks == 1 ? "" : "s", steps,
      bench::mpi_library_version().c_str());
  bench::Table t({{"ranks", 5},
                  {"batch", 5},
                  {"step ms", 8},
                  {"p90 ms", 8},
                  {"samples/s", 10, false, 0},
                  {"compute", 8},
                  {"halo", 7},
                  {"bcast/red", 9},
                  {"repart", 7}});
  t.header();
  t.row({static_cast<long long>(ranks), static_cast<long long>(batch), med, p90,
         static_cast<double>(batch) / med * 1e3, compute, halo, bcast, repart});
  if (detail) {
    std::printf("\n# rank 0, ms per step by operation (\".adjoint\": its backward entry)\n");
    for (const auto& [name, e] : snapshot)
      std::printf("%-28s %8.4f\n", name.c_str(), e.seconds * per);
  }
  return 0;
}
