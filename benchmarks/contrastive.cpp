// bench_contrastive: forward + backward time and measured peak memory per rank of the contrastive
// losses (NT-Xent, CLIP, SigLIP) under each strategy (allgather-nograd, gather, allgather, ring),
// with the raw baseline of the same run: MPI_Allgatherv of the embeddings and the three GEMMs of a
// [b, B] x D similarity block (forward logits, the two gradients) that the all-gather strategy's
// arithmetic cannot go below.
//
//   mpiexec.mpich -n 2 <build>/benchmarks/bench_contrastive [--csv] [--batch 256,1024,...]
//       [--dim 128] [--loss ntxent,clip,siglip] [--strategy ring,allgather,...] [--reps N]
//       [--max-gib G] [--no-raw] [--no-header]
//
// Memory: each rank's peak resident set (VmHWM of /proc/self/status, reset through
// /proc/self/clear_refs before each run) minus its resident set before the run, with distop's
// host cache off (DISTOP_HOST_CACHE_MB=0) and blocks of 64 KiB and more mapped by malloc
// directly, so that what a run frees goes back to the system. The embeddings themselves
// (allocated before) are not counted. A process's heap still keeps some freed memory, so the
// exact figures come from one configuration per process: benchmarks/contrastive.sh runs it so.
// A configuration whose stored logits alone would pass --max-gib GiB per rank is skipped, and
// printed as such.
#include <malloc.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <distop/distop.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

using namespace distop;

// A /proc/self/status field in KiB.
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + key.size());
  return -1;
}

void reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

Var<float> embeddings(std::int64_t rows, std::int64_t dim, std::uint64_t seed) {
  Partition self = Partition::self();
  TensorSpace space(self, Decomposition::balanced(Shape{rows, dim}, self.shape(), {0, -1}));
  DistTensor<float> x(space);
  std::vector<float> v(static_cast<std::size_t>(rows * dim));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(2 * random::uniform(seed, i) - 1);  // in [-1, 1)
  if (!v.empty()) x.local().copy_from(Tensor<float>::from_vector(Shape{rows, dim}, v));
  return Var<float>(x, true);
}

Var<float> scalar(float value) {
  DistTensor<float> x(TensorSpace(Shape{1}, Partition::self()));
  x.local().fill(value);
  return Var<float>(x, true);
}

// Bytes of logits a strategy keeps per rank (the largest rank), for --max-gib.
double stored_bytes(const std::string& loss, const std::string& strategy, double batch, double b) {
  const double per_pair = loss == "ntxent" ? 4 : loss == "clip" ? 2 : 1;  // logits per row pair
  if (strategy == "ring") return 0;
  if (strategy == "allgather") return per_pair * b * batch * sizeof(float);
  return per_pair * batch * batch * sizeof(float);  // allgather-nograd, gather's root
}

struct Row {
  double seconds = 0;
  double peak_max_mib = 0, peak_min_mib = 0;
};

Row run(const std::string& loss_name, loss::ContrastiveStrategy strategy, std::int64_t batch,
        std::int64_t dim, int reps) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::int64_t rows = batch / size + (rank < batch % size ? 1 : 0);
  Var<float> a = embeddings(rows, dim, 1 + rank), b = embeddings(rows, dim, 100 + rank);
  Var<float> t = scalar(std::log(10.0f)), z = scalar(-10.0f);
  loss::ContrastiveOptions opt;
  opt.strategy = strategy;
  std::vector<double> times;
  double peak = 0;
  for (int r = 0; r < reps; ++r) {
    a.zero_grad();
    b.zero_grad();
    MPI_Barrier(MPI_COMM_WORLD);
    reset_peak();
    const long before = status_kib("VmRSS");
    const double s = bench::time_one([&] {
      Tape tape;
      Var<float> l = loss_name == "ntxent" ? loss::ntxent(tape, a, b, 0.5f, MPI_COMM_WORLD, opt)
                     : loss_name == "clip"
                         ? loss::clip_loss(tape, a, b, t, MPI_COMM_WORLD, opt)
                         : loss::siglip_loss(tape, a, b, t, z, MPI_COMM_WORLD, opt);
      backward(tape, l);
    });
    peak = std::max(peak, double(status_kib("VmHWM") - before) / 1024.0);
    double slowest = 0;
    MPI_Allreduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(slowest);
  }
  Row row;
  row.seconds = bench::median(times);
  MPI_Allreduce(&peak, &row.peak_max_mib, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&peak, &row.peak_min_mib, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return row;
}

// The raw floor of the all-gather strategy for one [b, B] x D block: MPI_Allgatherv of the 2 b D
// floats of every rank, and the forward and two backward GEMMs (kernels::gemm is cblas_sgemm).
std::pair<double, double> baseline(std::int64_t batch, std::int64_t dim, int reps) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::int64_t rows = batch / size + (rank < batch % size ? 1 : 0);
  std::vector<int> counts(size), displs(size);
  for (int r = 0, at = 0; r < size; ++r) {
    counts[r] = static_cast<int>(2 * (batch / size + (r < batch % size ? 1 : 0)) * dim);
    displs[r] = at;
    at += counts[r];
  }
  std::vector<float> mine(2 * rows * dim, 0.5f), all(2 * batch * dim);
  std::vector<double> tc, tg;
  Tensor<float> q(Shape{rows, dim}), k(Shape{batch, dim}), s(Shape{rows, batch}),
      dq(Shape{rows, dim}), dk(Shape{batch, dim});
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    tc.push_back(bench::time_one([&] {
      MPI_Allgatherv(mine.data(), counts[rank], MPI_FLOAT, all.data(), counts.data(), displs.data(),
                     MPI_FLOAT, MPI_COMM_WORLD);
    }));
    tg.push_back(bench::time_one([&] {
      kernels::gemm(kernels::Op::N, kernels::Op::T, 1.0f, q, k, 0.0f, s);
      kernels::gemm(kernels::Op::N, kernels::Op::N, 1.0f, s, k, 0.0f, dq);
      kernels::gemm(kernels::Op::T, kernels::Op::N, 1.0f, s, q, 0.0f, dk);
    }));
  }
  return {bench::median(tc), bench::median(tg)};
}

}  // namespace

int main(int argc, char** argv) {
  // Freed memory must leave the process for the next run's peak to be its own.
  setenv("DISTOP_HOST_CACHE_MB", "0", 1);
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  mallopt(M_TRIM_THRESHOLD, 64 << 10);
  Environment env(argc, argv);
  CLI::App app("bench_contrastive: contrastive losses' time and peak memory per strategy");
  std::string batches = "256,1024,4096,8192,16384,32768", losses = "ntxent,clip,siglip",
              strategies = "allgather-nograd,gather,allgather,ring";
  std::int64_t dim = 128;
  int reps = 3;
  double max_gib = 6;
  bool csv = false, no_raw = false, no_header = false;
  app.add_option("--batch", batches, "global batch sizes B, comma-separated");
  app.add_option("--dim", dim, "embedding dimension D");
  app.add_option("--loss", losses, "losses, comma-separated");
  app.add_option("--strategy", strategies, "strategies, comma-separated");
  app.add_option("--reps", reps, "repetitions per configuration (median time, largest peak)");
  app.add_option("--max-gib", max_gib, "skip configurations storing more logits per rank");
  app.add_flag("--csv", csv, "CSV output");
  app.add_flag("--no-raw", no_raw, "leave out the raw baseline rows");
  app.add_flag("--no-header", no_header, "leave out the header line");
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && !no_header) {
    if (csv)
      std::printf("P,B,D,loss,strategy,ms,peak_mib_max_rank,peak_mib_min_rank\n");
    else
      std::printf("%2s %6s %5s %-7s %-17s %11s %15s %15s\n", "P", "B", "D", "loss", "strategy",
                  "fwd+bwd ms", "peak MiB (max)", "peak MiB (min)");
  }
  for (const std::string& bs : bench::split_list(batches)) {
    const std::int64_t batch = std::stoll(bs);
    const int base_reps = batch >= 16384 ? 1 : reps;
    const auto [comm_s, gemm_s] =
        no_raw ? std::pair<double, double>{0, 0} : baseline(batch, dim, base_reps);
    if (rank == 0 && !no_raw) {
      if (csv)
        std::printf("%d,%lld,%lld,raw,allgatherv+3gemm[b;B;D],%.3f,,\n", size,
                    static_cast<long long>(batch), static_cast<long long>(dim),
                    1e3 * (comm_s + gemm_s));
      else
        std::printf(
            "%2d %6lld %5lld %-7s %-17s %11.3f   (MPI_Allgatherv %.3f ms + 3 sgemm of "
            "[b, B] x D %.3f ms)\n",
            size, static_cast<long long>(batch), static_cast<long long>(dim), "raw", "floor",
            1e3 * (comm_s + gemm_s), 1e3 * comm_s, 1e3 * gemm_s);
      std::fflush(stdout);
    }
    for (const std::string& ln : bench::split_list(losses))
      for (const std::string& sn : bench::split_list(strategies)) {
        const double b = static_cast<double>((batch + size - 1) / size);
        const double need = stored_bytes(ln, sn, double(batch), b) / double(1 << 30);
        if (need > max_gib) {
          if (rank == 0) {
            if (csv)
              std::printf("%d,%lld,%lld,%s,%s,skipped,%.0f,\n", size, static_cast<long long>(batch),
                          static_cast<long long>(dim), ln.c_str(), sn.c_str(), need * 1024);
            else
              std::printf(
                  "%2d %6lld %5lld %-7s %-17s %11s   (its logits alone: %.1f GiB per rank)\n", size,
                  static_cast<long long>(batch), static_cast<long long>(dim), ln.c_str(),
                  sn.c_str(), "skipped", need);
            std::fflush(stdout);
          }
          continue;
        }
        const Row row = run(ln, loss::parse_strategy(sn), batch, dim, base_reps);
        if (rank == 0) {
          if (csv)
            std::printf("%d,%lld,%lld,%s,%s,%.3f,%.1f,%.1f\n", size, static_cast<long long>(batch),
                        static_cast<long long>(dim), ln.c_str(), sn.c_str(), 1e3 * row.seconds,
                        row.peak_max_mib, row.peak_min_mib);
          else
            std::printf("%2d %6lld %5lld %-7s %-17s %11.3f %15.1f %15.1f\n", size,
                        static_cast<long long>(batch), static_cast<long long>(dim), ln.c_str(),
                        sn.c_str(), 1e3 * row.seconds, row.peak_max_mib, row.peak_min_mib);
          std::fflush(stdout);
        }
      }
  }
  return 0;
}
