// bench_collectives: distop's Broadcast, SumReduce and AllSumReduce, forward and adjoint, timed
// against the raw MPI call that moves the same bytes.
//
// Run:  mpiexec.mpich -n 2 build/benchmarks/bench_collectives [--csv] [--reps N] [--max-bytes B]
//
// Cases, for float tensors of 8 B to --max-bytes (16 MiB by default; 8 B and then the powers of 4,
// or every power of 2 with --step 2), on the P ranks of MPI_COMM_WORLD (the targets are set at
// P = 2):
//   Broadcast     forward  [1] of {0} -> [P] of {0..P-1}    raw: MPI_Bcast from rank 0
//   Broadcast     adjoint  SumReduce onto rank 0             raw: MPI_Reduce(SUM) to rank 0
//   SumReduce     forward  [P] of {0..P-1} -> [1] of {0}    raw: MPI_Reduce(SUM) to rank 0
//   SumReduce     adjoint  Broadcast from rank 0             raw: MPI_Bcast from rank 0
//   AllSumReduce  forward and adjoint, over a replicated [P] grid    raw: MPI_Allreduce(SUM)
// The raw calls run on a duplicate of MPI_COMM_WORLD, on the very buffers distop's tensors own, so
// both sides see the same memory. Inputs and outputs are separate tensors, so values never grow.
//
// Timing rule (the same for distop and raw MPI): every repetition starts with an MPI_Barrier; each
// rank times its own call with MPI_Wtime; the repetition's time is the MAXIMUM OVER THE RANKS of
// those per-rank times (taken with one MPI_Allreduce(MAX) after the loop, outside the timed
// region). The table reports the median over repetitions, in microseconds. distop and raw
// repetitions are interleaved, alternating which goes first, so that drift in the machine's speed
// hits both alike. After a warm-up of 3 to 10 pairs (about 0.1 s), each size runs --reps
// repetitions (default 1000); sizes of 64 KiB and more run fewer where the warm-up predicts that
// the pairs would take more than --budget seconds (default 0.25), but never fewer than 50.
//
// Targets (the pass column): distop / raw <= 1.05 at >= 64 KiB; distop <= raw + 2 us below.
//
// Broadcast forward (and SumReduce adjoint) also writes the root's own copy of the output (y = x, a
// memcpy on rank 0), which a raw MPI_Bcast does not do; the baseline stays the raw call alone.
// --prototypes adds rows that time ways of doing that copy, each against the same raw MPI_Bcast:
//   proto:bcast+copy   MPI_Bcast, then the root's memcpy (what distop does, minus the operator)
//   proto:ibcast       MPI_Ibcast + MPI_Wait, no copy (the cost of the nonblocking call itself)
//   proto:ibcast|copy  MPI_Ibcast, the root's memcpy while it is in flight, then MPI_Wait
//   proto:isend|copy   the root MPI_Isends to every other rank, copies, then MPI_Waitall; the
//                      others MPI_Recv (a flat tree: what a 2-rank group needs)
// and two for the reduction, each against the raw MPI_Reduce:
//   proto:allreduce    MPI_Allreduce, the non-roots receiving into a scratch buffer (this MPICH's
//                      MPI_Reduce is much slower than its MPI_Allreduce)
//   proto:recv+sum     the root receives every other rank's box into a scratch buffer in turn and
//                      adds it; the others MPI_Send (a flat tree again)
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_mpi.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/environment.hpp"
#include "distop/dist/decomposition.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/broadcast_plan.hpp"
#include "distop/ops/sum_reduce.hpp"

namespace {

namespace bench = distop::bench;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::TensorSpace;

struct Settings {
  int reps = 1000;
  double budget_s = 0.25;
  std::int64_t max_bytes = 16 << 20;
  int step = 4;
  bool csv = false;
  bool prototypes = false;
};

using bench::Case;
using bench::fill;
using bench::kLargeBytes;
using bench::kLargeRatio;
using bench::kSmallSlackUs;
using bench::Row;

Row measure(MPI_Comm comm, const Settings& s, const Case& c, std::int64_t bytes) {
  return bench::measure_row(comm, s.reps, s.budget_s, c, bytes);
}
void print_row(const Settings& s, const Row& r) { bench::print_row(s.csv, r); }
const bench::Table& table() { return bench::mpi_table(); }

int run(const Settings& s) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_collectives needs at least 2 ranks\n");
    return 1;
  }
  const bool root = rank == 0;
  auto raw = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm rc = raw.get();

  // Partitions and the broadcast plan are built once (collective); operators for each size share
  // them without further communication.
  const Partition one = Partition::world(Shape{1}, {0});
  const Partition all = Partition::world(Shape{size});
  const auto plan = std::make_shared<const distop::BroadcastPlan>(one, all);

  if (rank == 0) {
    if (s.csv) {
      std::printf("op,direction,bytes,ranks,distop_us,mpi_us,ratio\n");
    } else {
      std::printf("# bench_collectives: %d ranks, float tensors, %s\n", size,
                  bench::mpi_library_version().c_str());
      std::printf(
          "# time per repetition = max over ranks (barrier before each); median over reps\n");
      std::printf("# pass: ratio <= %.2f at >= %lld B; distop <= mpi + %.0f us below\n",
                  kLargeRatio, static_cast<long long>(kLargeBytes), kSmallSlackUs);
      table().header();
    }
  }

  int rows = 0;
  int passed = 0;
  for (const auto bytes : bench::size_ladder(s.max_bytes, s.step)) {
    const std::int64_t n = bytes / static_cast<std::int64_t>(sizeof(float));
    const int count = static_cast<int>(n);
    const TensorSpace root_space(Shape{n}, one);
    const distop::Broadcast<float> bcast(plan, root_space);
    const distop::SumReduce<float> reduce(plan, root_space);
    const TensorSpace rep_space(all, distop::Decomposition::balanced(Shape{n}, Shape{size}, {-1}));
    const distop::AllSumReduce<float> allsum(rep_space, {0});

    // Separate inputs and outputs: x_* on rank 0 only, y_* and a_* on every rank.
    DistTensor<float> x_in(root_space);
    DistTensor<float> x_out(root_space);
    DistTensor<float> y_in(bcast.range());
    DistTensor<float> y_out(bcast.range());
    DistTensor<float> a_in(rep_space);
    DistTensor<float> a_out(rep_space);
    fill(x_in, 1.0f);
    fill(y_in, 1.0f);
    fill(a_in, 1.0f);

    float* const bcast_buf = root ? x_in.data() : y_out.data();
    auto raw_bcast = [&] {
      DISTOP_MPI_CHECK(MPI_Bcast(bcast_buf, count, MPI_FLOAT, 0, rc), "bench");
    };
    auto raw_reduce = [&] {
      DISTOP_MPI_CHECK(
          MPI_Reduce(y_in.data(), root ? x_out.data() : nullptr, count, MPI_FLOAT, MPI_SUM, 0, rc),
          "bench");
    };
    auto raw_allreduce = [&] {
      DISTOP_MPI_CHECK(MPI_Allreduce(a_in.data(), a_out.data(), count, MPI_FLOAT, MPI_SUM, rc),
                       "bench");
    };
    const auto copy_bytes = static_cast<std::size_t>(bytes);
    std::vector<MPI_Request> reqs(static_cast<std::size_t>(size - 1));
    std::vector<Case> cases{
        {"Broadcast", "forward", [&] { bcast.forward(x_in, y_out); }, raw_bcast},
        {"Broadcast", "adjoint", [&] { bcast.adjoint(y_in, x_out); }, raw_reduce},
        {"SumReduce", "forward", [&] { reduce.forward(y_in, x_out); }, raw_reduce},
        {"SumReduce", "adjoint", [&] { reduce.adjoint(x_in, y_out); }, raw_bcast},
        {"AllSumReduce", "forward", [&] { allsum.forward(a_in, a_out); }, raw_allreduce},
        {"AllSumReduce", "adjoint", [&] { allsum.adjoint(a_in, a_out); }, raw_allreduce},
    };
    if (s.prototypes) {
      cases.push_back({"proto:bcast+copy", "forward",
                       [&] {
                         raw_bcast();
                         if (root) std::memcpy(y_out.data(), x_in.data(), copy_bytes);
                       },
                       raw_bcast});
      cases.push_back({"proto:ibcast", "forward",
                       [&] {
                         MPI_Request req = MPI_REQUEST_NULL;
                         DISTOP_MPI_CHECK(MPI_Ibcast(bcast_buf, count, MPI_FLOAT, 0, rc, &req),
                                          "bench");
                         DISTOP_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE), "bench");
                       },
                       raw_bcast});
      cases.push_back({"proto:ibcast|copy", "forward",
                       [&] {
                         MPI_Request req = MPI_REQUEST_NULL;
                         DISTOP_MPI_CHECK(MPI_Ibcast(bcast_buf, count, MPI_FLOAT, 0, rc, &req),
                                          "bench");
                         if (root) std::memcpy(y_out.data(), x_in.data(), copy_bytes);
                         DISTOP_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE), "bench");
                       },
                       raw_bcast});
      cases.push_back(
          {"proto:isend|copy", "forward",
           [&] {
             if (root) {
               for (int r = 1; r < size; ++r)
                 DISTOP_MPI_CHECK(MPI_Isend(x_in.data(), count, MPI_FLOAT, r, 0, rc,
                                            &reqs[static_cast<std::size_t>(r - 1)]),
                                  "bench");
               std::memcpy(y_out.data(), x_in.data(), copy_bytes);
               DISTOP_MPI_CHECK(MPI_Waitall(size - 1, reqs.data(), MPI_STATUSES_IGNORE), "bench");
             } else {
               DISTOP_MPI_CHECK(
                   MPI_Recv(y_out.data(), count, MPI_FLOAT, 0, 0, rc, MPI_STATUS_IGNORE), "bench");
             }
           },
           raw_bcast});
      cases.push_back({"proto:allreduce", "adjoint",
                       [&] {
                         DISTOP_MPI_CHECK(
                             MPI_Allreduce(y_in.data(), root ? x_out.data() : y_out.data(), count,
                                           MPI_FLOAT, MPI_SUM, rc),
                             "bench");
                       },
                       raw_reduce});
      cases.push_back(
          {"proto:recv+sum", "adjoint",
           [&] {
             if (root) {
               float* const out = x_out.data();
               const float* const in = y_in.data();
               float* const scratch = a_out.data();
               for (int r = 1; r < size; ++r) {
                 DISTOP_MPI_CHECK(MPI_Recv(scratch, count, MPI_FLOAT, r, 0, rc, MPI_STATUS_IGNORE),
                                  "bench");
                 const float* const acc = r == 1 ? in : out;
                 for (std::int64_t i = 0; i < n; ++i) out[i] = acc[i] + scratch[i];
               }
             } else {
               DISTOP_MPI_CHECK(MPI_Send(y_in.data(), count, MPI_FLOAT, 0, 0, rc), "bench");
             }
           },
           raw_reduce});
    }
    for (const auto& c : cases) {
      const Row r = measure(rc, s, c, bytes);
      ++rows;
      if (r.pass()) ++passed;
      if (rank == 0) print_row(s, r);
    }
  }
  if (rank == 0 && !s.csv) std::printf("# %d of %d rows pass\n", passed, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  Settings s;
  CLI::App app{"Times distop's Broadcast, SumReduce and AllSumReduce against raw MPI"};
  bench::add_repetition_options(app, s.reps, s.budget_s, /*per_size=*/true);
  bench::add_size_ladder_options(app, s.max_bytes, s.step);
  app.add_flag("--csv", s.csv, "print op,direction,bytes,ranks,distop_us,mpi_us,ratio rows");
  app.add_flag("--prototypes", s.prototypes,
               "add rows timing alternatives for the broadcast root's own copy");
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  return bench::run_or_abort([&] { return run(s); });
}
