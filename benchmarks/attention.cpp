// bench_attention: forward + backward time and peak tensor memory per rank of scaled dot-product
// attention over a sequence of S tokens on P ranks, by strategy:
//   none      unsharded: every rank attends over the whole sequence (what one rank needs without
//             sequence parallelism; the tape's matmul, softmax and matmul);
//   ring      nn::SequenceParallelAttention, ring strategy (S / P tokens per rank);
//   alltoall  nn::SequenceParallelAttention, all-to-all strategy (needs H >= P).
// With the raw baseline of the same run: the BLAS GEMMs of the per-rank work (the score and output
// products forward, the five products backward, of one rank's share of the heads and queries
// against the whole sequence), which no strategy's arithmetic goes below.
//
//   mpiexec.mpich -n P <build>/benchmarks/bench_attention [--strategy none,ring,alltoall]
//       [--seq 256,1024,...] [--batch N] [--heads H] [--head-dim D] [--causal]
//       [--layout contiguous|zigzag] [--reps R] [--max-mib M] [--csv] [--no-header]
//       [--budget-mib B]
//
// Memory: distop::tensor_memory()'s peak (host tensor storage) during the forward and backward,
// minus what was in use before (q, k, v and the output gradient, allocated before, are not
// counted), the largest over the ranks. A configuration whose scores (the unsharded S x S per
// head, or the all-to-all's per rank) would pass --max-mib is skipped and printed as such.
// --budget-mib B: for each strategy, the sequence doubled from the first --seq (one run each)
// while the peak memory per rank stays within B MiB; prints the largest S that fits, with its peak.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <distop/distop.hpp>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

using namespace distop;

struct Config {
  std::string strategy;
  std::int64_t seq = 0, batch = 1, heads = 8, dim = 64;
  bool causal = false;
  nn::SequenceLayout layout = nn::SequenceLayout::contiguous;
};

struct Row {
  double ms = 0, gemm_ms = 0;
  std::size_t peak_bytes = 0;
};

DistTensor<float> seeded(const TensorSpace& space, std::uint64_t seed) {
  DistTensor<float> x(space);
  std::vector<float> v(static_cast<std::size_t>(space.local_shape().numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(2 * random::uniform(seed, i) - 1);
  if (!v.empty()) x.local().copy_from(Tensor<float>::from_vector(space.local_shape(), v));
  return x;
}

// The unsharded attention of the tape's operations.
Var<float> whole_attention(Tape& tape, const Var<float>& q, const Var<float>& k,
                           const Var<float>& v, bool causal, double scale) {
  const Var<float> s = nn::matmul_nt(tape, nn::scale(tape, q, scale), k);
  return nn::matmul(tape, causal ? nn::causal_softmax(tape, s) : nn::softmax(tape, s), v);
}

Row measure(const Config& c, int reps, int size) {
  const Partition world = Partition::world(Shape{size});
  const bool none = c.strategy == "none";
  const Shape global{c.batch, c.heads, c.seq, c.dim};
  TensorSpace space =
      none ? TensorSpace(world, Decomposition::balanced(global, Shape{size}, {-1, -1, -1, -1}))
           : TensorSpace(
                 world,
                 Decomposition::blocks(
                     global, Shape{size},
                     {{c.batch}, {c.heads}, nn::sequence_blocks(c.seq, size, c.layout), {c.dim}},
                     {-1, -1, size > 1 ? 0 : -1, -1}));
  std::unique_ptr<nn::SequenceParallelAttention<float>> plan;
  if (!none)
    plan = std::make_unique<nn::SequenceParallelAttention<float>>(
        space, nn::SequenceParallel{.sequence_axis = 0,
                                    .strategy = nn::parse_sequence_parallel_strategy(c.strategy),
                                    .layout = c.layout});
  Var<float> q(seeded(space, 1), true), k(seeded(space, 2), true), v(seeded(space, 3), true);
  const DistTensor<float> dy = seeded(space, 4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  auto step = [&] {
    Tape tape;
    for (auto* x : {&q, &k, &v}) x->zero_grad();
    Var<float> y = none ? whole_attention(tape, q, k, v, c.causal, scale)
                        : plan->forward(tape, q, k, v, {.is_causal = c.causal});
    backward(tape, y, dy);
  };
  step();  // builds what is built once
  for (auto* x : {&q, &k, &v}) x->zero_grad();
  Row row;
  std::vector<double> times;
  std::size_t peak = 0;
  for (int r = 0; r < reps; ++r) {
    const std::size_t before = tensor_memory().in_use_bytes;
    reset_peak_tensor_memory();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    step();
    double t = MPI_Wtime() - t0;
    peak = std::max(peak, tensor_memory().peak_bytes - before);
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(t);
  }
  row.ms = 1e3 * bench::median(times);
  unsigned long long p = peak;
  MPI_Allreduce(MPI_IN_PLACE, &p, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  row.peak_bytes = static_cast<std::size_t>(p);

  // The raw baseline: the GEMMs of this rank's share (queries rows of S / P, or all S for none,
  // against the S keys, per batch entry and head): 2 forward, 5 backward (the causal mask halves
  // the work a blocked kernel does; the baseline keeps the full products).
  const std::int64_t rows = none ? c.seq : (c.seq + size - 1) / size;
  Tensor<float> a = Tensor<float>::uninitialized(Shape{rows, c.dim});
  Tensor<float> b = Tensor<float>::uninitialized(Shape{c.seq, c.dim});
  Tensor<float> s = Tensor<float>::uninitialized(Shape{rows, c.seq});
  a.fill(0.5F);
  b.fill(0.25F);
  s.fill(0.125F);
  std::vector<double> gemm_times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = MPI_Wtime();
    for (std::int64_t pair = 0; pair < c.batch * c.heads; ++pair) {
      kernels::gemm(kernels::Op::N, kernels::Op::T, 1.0F, a, b, 0.0F, s);  // scores
      kernels::gemm(kernels::Op::N, kernels::Op::N, 1.0F, s, b, 0.0F, a);  // output
      kernels::gemm(kernels::Op::N, kernels::Op::T, 1.0F, a, b, 0.0F, s);  // scores again
      kernels::gemm(kernels::Op::N, kernels::Op::T, 1.0F, a, b, 0.0F, s);  // dy v^T
      kernels::gemm(kernels::Op::T, kernels::Op::N, 1.0F, s, a, 0.0F, b);  // dv
      kernels::gemm(kernels::Op::N, kernels::Op::N, 1.0F, s, b, 0.0F, a);  // dq
      kernels::gemm(kernels::Op::T, kernels::Op::N, 1.0F, s, a, 0.0F, b);  // dk
    }
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    gemm_times.push_back(t);
  }
  row.gemm_ms = 1e3 * bench::median(gemm_times);
  return row;
}

// The bytes of scores a strategy holds at once on a rank (float), for --max-mib.
double score_bytes(const Config& c, int size) {
  const double per_head = c.strategy == "ring" ? std::pow(std::ceil(double(c.seq) / size), 2)
                                               : double(c.seq) * double(c.seq);
  const double heads = c.strategy == "alltoall" ? std::ceil(double(c.heads) / size) : c.heads;
  return 4.0 * per_head * (c.strategy == "ring" ? 2.0 : c.batch * heads * 2.0);
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  return bench::run_or_abort([&] {
    CLI::App app("bench_attention: attention's forward + backward time and peak memory per rank");
    std::string strategies = "none,ring,alltoall", seqs = "256,1024,4096", layout = "contiguous";
    Config base;
    int reps = 3;
    double max_mib = 4096;
    bool csv = false, no_header = false;
    double budget_mib = 0;
    app.add_option("--strategy", strategies, "none, ring, alltoall, comma-separated");
    app.add_option("--seq", seqs, "sequence lengths S, comma-separated");
    app.add_option("--batch", base.batch, "batch N (1)");
    app.add_option("--heads", base.heads, "heads H (8)");
    app.add_option("--head-dim", base.dim, "head dimension D (64)");
    app.add_flag("--causal", base.causal, "causal masking");
    app.add_option("--layout", layout, "contiguous or zigzag (ring and alltoall)");
    app.add_option("--reps", reps, "timed repetitions per configuration (median)");
    app.add_option("--max-mib", max_mib, "skip configurations whose scores pass this many MiB");
    app.add_flag("--csv", csv, "CSV output");
    app.add_flag("--no-header", no_header, "leave out the header line");
    app.add_option("--budget-mib", budget_mib,
                   "find the longest sequence (doubling) each strategy fits in this many MiB per "
                   "rank");
    if (const auto code = bench::parse_args(app, argc, argv)) return *code;
    base.layout = layout == "zigzag" ? nn::SequenceLayout::zigzag : nn::SequenceLayout::contiguous;
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (budget_mib > 0) {
      if (rank == 0)
        std::printf(csv ? "strategy,ranks,budget_mib,largest_seq,peak_bytes\n"
                        : "%-9s %5s %11s %12s %14s\n",
                    "strategy", "ranks", "budget MiB", "largest seq", "peak MiB/rank");
      for (const std::string& st : bench::split_list(strategies)) {
        Config c = base;
        c.strategy = st;
        std::int64_t best = 0;
        std::size_t best_peak = 0;
        if (st == "alltoall" && c.heads < size) continue;
        for (c.seq = std::stoll(bench::split_list(seqs).front()); c.seq <= (std::int64_t{1} << 24);
             c.seq *= 2) {
          const Row row = measure(c, 1, size);
          if (static_cast<double>(row.peak_bytes) > budget_mib * 1048576.0) break;
          best = c.seq;
          best_peak = row.peak_bytes;
        }
        if (rank == 0 && csv)
          std::printf("%s,%d,%.0f,%lld,%zu\n", st.c_str(), size, budget_mib,
                      static_cast<long long>(best), best_peak);
        else if (rank == 0)
          std::printf("%-9s %5d %11.0f %12lld %14.2f\n", st.c_str(), size, budget_mib,
                      static_cast<long long>(best), best_peak / 1048576.0);
        std::fflush(stdout);
      }
      return 0;
    }
    if (rank == 0 && !no_header) {
      if (csv)
        std::printf(
            "strategy,ranks,seq,batch,heads,head_dim,causal,layout,ms,peak_bytes,gemm_ms\n");
      else
        std::printf("%-9s %5s %7s %9s %14s %12s\n", "strategy", "ranks", "seq", "ms",
                    "peak MiB/rank", "GEMM ms");
    }
    for (const std::string& st : bench::split_list(strategies))
      for (const std::string& sq : bench::split_list(seqs)) {
        Config c = base;
        c.strategy = st;
        c.seq = std::stoll(sq);
        if (st == "none" && size > 1 && rank == 0 && !csv && sq == bench::split_list(seqs).front())
          std::printf("# none: every rank attends over the whole sequence\n");
        if (score_bytes(c, size) > max_mib * 1048576.0 || (st == "alltoall" && c.heads < size)) {
          if (rank == 0)
            std::printf(csv ? "%s,%d,%lld,skipped\n" : "%-9s %5d %7lld   skipped\n", st.c_str(),
                        size, static_cast<long long>(c.seq));
          continue;
        }
        const Row row = measure(c, reps, size);
        if (rank != 0) continue;
        if (csv)
          std::printf("%s,%d,%lld,%lld,%lld,%lld,%d,%s,%.3f,%zu,%.3f\n", st.c_str(), size,
                      static_cast<long long>(c.seq), static_cast<long long>(c.batch),
                      static_cast<long long>(c.heads), static_cast<long long>(c.dim),
                      c.causal ? 1 : 0, layout.c_str(), row.ms, row.peak_bytes, row.gemm_ms);
        else
          std::printf("%-9s %5d %7lld %9.2f %14.2f %12.2f\n", st.c_str(), size,
                      static_cast<long long>(c.seq), row.ms, row.peak_bytes / 1048576.0,
                      row.gemm_ms);
        std::fflush(stdout);
      }
    return 0;
  });
}
