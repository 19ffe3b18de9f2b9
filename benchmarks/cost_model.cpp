// bench_cost_model: fits the alpha-beta-gamma cost model (distop/ops/cost_model.hpp) on this
// machine and compares each distop operator's predicted time with its measured time.
//
// Run:  mpiexec.mpich -n 2 build/benchmarks/bench_cost_model [--csv] [--reps N] [--budget S]
//                                                            [--min-bytes B] [--max-bytes B]
//
// The fit (on ranks 0 and 1 of MPI_COMM_WORLD, the other ranks idle):
//   alpha  the one-way time of an 8 B message: half the median round trip of an MPI_Send /
//          MPI_Recv ping-pong;
//   beta   from ping-pongs of 64 KiB to --max-bytes (powers of 4), each leg timed on its own
//          (barrier, send one way, maximum over the ranks): the least-squares fit of alpha + n beta
//          to the one-way times, in relative error, separately for sizes up to 2 MiB (a core's L2
//          cache) and above (the copy through shared memory runs at cache or at DRAM speed);
//   gamma  from the local sum c[i] = a[i] + b[i] of float arrays of the same sizes, per byte of c
//          (the same relative least squares, no intercept), timed on every rank at once;
//   copy   the same from std::memcpy, per byte copied.
// beta, gamma and copy are taken at the operator's tensor size (choosing beta by the largest
// message's size instead fitted worse: docs/scaling.md).
// Each operator, forward and adjoint, on float tensors of --min-bytes (64 KiB) to --max-bytes
// (16 MiB), powers of 4 ("bytes" is the whole tensor; for HaloExchange the ghost volume each rank
// receives), set up as in bench_collectives and bench_movement:
//   Broadcast / SumReduce   [n] on rank 0 <-> a copy on every rank (one BroadcastPlan)
//   AllSumReduce            [n] replicated on every rank
//   Gather / Scatter        [n] split over [P] <-> whole on rank 0
//   AllGather / ReduceScatter  [n] split over [P] <-> whole on every rank
//   Repartition             [R, C] (R * C = n, R the power of 2 >= sqrt(n)) from a [P, 1] to a
//                           [1, P] grid
//   HaloExchange            [2P, C] split by rows, ghost width 1 on inner sides (a 3-tap window)
//   SendRecv                [n] from rank 0 to rank 1
// Predicted: Broadcast, SumReduce and AllSumReduce from cost::broadcast / sum_reduce /
// all_sum_reduce (out of place); the point-to-point operators from cost::point_to_point_plan with
// the operator's own forward_stats / adjoint_stats on each rank and its local work (the bytes it
// packs, copies, unpacks and sums: see below), the maximum over the ranks. Local work: the bytes
// of its output a rank does not receive are copied from its input; Repartition's forward packs
// what it sends (column blocks) and its adjoint unpacks what it receives; HaloExchange copies the
// padded array before the exchange and its adjoint adds the received ghosts; adjoints of
// AllGather (ReduceScatter's forward) add the received copies.
// Measured: every repetition starts with an MPI_Barrier, each rank times its call with MPI_Wtime,
// the repetition's time is the maximum over the ranks; the median over --reps repetitions (default
// 200; fewer where the warm-up predicts more than --budget seconds, default 0.3; never fewer than
// 20). Pass: |predicted / measured - 1| <= 0.2.
#include "distop/ops/cost_model.hpp"

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
#include "distop/ops/all_gather.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/ops/broadcast_plan.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/ops/scatter.hpp"
#include "distop/ops/send_recv.hpp"
#include "distop/ops/sum_reduce.hpp"

namespace {

namespace bench = distop::bench;
namespace cost = distop::cost;
using cost::Direction;
using distop::CommStats;
using distop::DistTensor;
using distop::Partition;
using distop::Shape;
using distop::TensorSpace;

constexpr int kMinRepsHere = 20;
constexpr double kTolerance = 0.2;

struct Settings {
  int reps = 200;
  double budget_s = 0.3;
  std::int64_t min_bytes = 64 << 10;
  std::int64_t max_bytes = 16 << 20;
  bool csv = false;
};

std::vector<std::int64_t> sizes(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  for (std::int64_t b = 1024; b <= hi; b *= 4)
    if (b >= lo) out.push_back(b);
  return out;
}

// Median over repetitions of the max over ranks of fn's time (a barrier before each), seconds.
double measure(MPI_Comm comm, const Settings& s, const std::function<void()>& fn) {
  auto run = [&](int reps) {
    std::vector<double> t(static_cast<std::size_t>(reps));
    for (auto& x : t) {
      DISTOP_MPI_CHECK(MPI_Barrier(comm), "bench");
      const double t0 = MPI_Wtime();
      fn();
      x = MPI_Wtime() - t0;
    }
    DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data(), reps, MPI_DOUBLE, MPI_MAX, comm),
                     "bench");
    return t;
  };
  const auto warm = run(3);
  const double one = *std::min_element(warm.begin(), warm.end());
  int reps = s.reps;
  if (s.budget_s > 0 && one * reps > s.budget_s)
    reps = std::max(kMinRepsHere, static_cast<int>(s.budget_s / one));
  return bench::median(run(reps));
}

// Relative least squares: the b minimising sum ((a + n b - t) / t)^2 for fixed a.
double fit_slope(const std::vector<double>& n, const std::vector<double>& t, double a) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    num += n[i] * (t[i] - a) / (t[i] * t[i]);
    den += n[i] * n[i] / (t[i] * t[i]);
  }
  return num / den;
}

DISTOP_BENCH_VECTOR_CLONES
void add_arrays(const float* a, const float* b, float* c, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

// The fitted machine: one alpha; beta fitted separately for tensors that fit a core's L2 cache
// (<= kCacheBytes) and for larger ones; gamma and copy measured at each size (the local rates fall
// by 2-4x once the arrays leave the caches).
constexpr std::int64_t kCacheBytes = 2 << 20;
struct Fit {
  double alpha = 0, beta_cache = 0, beta_memory = 0, round_trip_8 = 0;
  std::vector<std::int64_t> bytes;
  std::vector<double> gamma, copy;
  // At the fitted sizes (64 KiB and above): one-way, round trip / 2, sum and memcpy times.
  std::vector<double> n, t_net, t_rt, t_sum, t_copy;
  bool plausible() const {
    return beta_cache > 0 && beta_memory > 0 && !t_net.empty() && alpha < t_net.front();
  }
  void print(std::FILE* out) const;
  cost::Machine at(std::int64_t b) const {
    std::size_t i = 0;
    while (i + 1 < bytes.size() && bytes[i] < b) ++i;
    return {alpha, b <= kCacheBytes ? beta_cache : beta_memory, gamma[i], copy[i]};
  }
};

Fit fit(MPI_Comm comm, const Settings& s, int rank) {
  Fit f;
  std::vector<char> buf(static_cast<std::size_t>(s.max_bytes), 1);
  std::vector<char> other(buf.size(), 2);
  // The ping-pong, one leg at a time: rank 0 sends to rank 1 and then rank 1 back to rank 0, each
  // leg started by a barrier and timed as the maximum over the ranks (as the operators are).
  auto leg = [&](std::int64_t bytes, int from, int to) {
    const int count = static_cast<int>(bytes);
    return measure(comm, s, [&] {
      if (rank == from) MPI_Send(buf.data(), count, MPI_BYTE, to, 3, comm);
      if (rank == to) MPI_Recv(other.data(), count, MPI_BYTE, from, 3, comm, MPI_STATUS_IGNORE);
    });
  };
  auto one_way = [&](std::int64_t bytes) { return (leg(bytes, 0, 1) + leg(bytes, 1, 0)) / 2; };
  // The classic round trip (both legs in one timed region), reported for comparison.
  auto round_trip = [&](std::int64_t bytes) {
    const int count = static_cast<int>(bytes);
    return measure(comm, s, [&] {
      if (rank == 0) {
        MPI_Send(buf.data(), count, MPI_BYTE, 1, 3, comm);
        MPI_Recv(buf.data(), count, MPI_BYTE, 1, 3, comm, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf.data(), count, MPI_BYTE, 0, 3, comm, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), count, MPI_BYTE, 0, 3, comm);
      }
    });
  };
  f.alpha = one_way(8);
  const double rt8 = round_trip(8) / 2;
  std::vector<double> n, t_net, t_rt, t_sum, t_copy;
  const auto n_max = static_cast<std::size_t>(s.max_bytes / 4);
  std::vector<float> a(n_max, 1.0f), b(n_max, 2.0f), c(n_max, 0.0f);
  for (const auto bytes : sizes(1024, s.max_bytes)) {
    const std::int64_t floats = bytes / 4;
    const double t_s = measure(comm, s, [&] { add_arrays(a.data(), b.data(), c.data(), floats); });
    const double t_c =
        measure(comm, s, [&] { std::memcpy(c.data(), a.data(), static_cast<std::size_t>(bytes)); });
    f.bytes.push_back(bytes);
    f.gamma.push_back(t_s / static_cast<double>(bytes));
    f.copy.push_back(t_c / static_cast<double>(bytes));
    if (bytes < (64 << 10)) continue;
    n.push_back(static_cast<double>(bytes));
    t_net.push_back(one_way(bytes));
    t_rt.push_back(round_trip(bytes) / 2);
    t_sum.push_back(t_s);
    t_copy.push_back(t_c);
  }
  std::vector<double> n_c, t_c, n_m, t_m;
  for (std::size_t i = 0; i < n.size(); ++i) {
    (n[i] <= kCacheBytes ? n_c : n_m).push_back(n[i]);
    (n[i] <= kCacheBytes ? t_c : t_m).push_back(t_net[i]);
  }
  f.beta_cache = fit_slope(n_c, t_c, f.alpha);
  f.beta_memory = n_m.empty() ? f.beta_cache : fit_slope(n_m, t_m, f.alpha);
  f.round_trip_8 = rt8;
  f.n = n;
  f.t_net = t_net;
  f.t_rt = t_rt;
  f.t_sum = t_sum;
  f.t_copy = t_copy;
  return f;
}

void Fit::print(std::FILE* out) const {
  const Fit& f = *this;
  const double rt8 = round_trip_8;
  std::fprintf(out,
               "# fit: alpha = %.3f us; beta = %.4f ns/B (%.2f GB/s) up to %lld B, %.4f ns/B "
               "(%.2f GB/s) above, from one-way legs of the ping-pong; round trip / 2 at 8 B: "
               "%.3f us\n",
               f.alpha * 1e6, f.beta_cache * 1e9, 1e-9 / f.beta_cache,
               static_cast<long long>(kCacheBytes), f.beta_memory * 1e9, 1e-9 / f.beta_memory,
               rt8 * 1e6);
  std::fprintf(out, "# %10s %12s %12s %12s %12s %10s %10s\n", "bytes", "one-way_us", "a+b*n_us",
               "rtt/2_us", "sum_us", "gamma_GB/s", "copy_GB/s");
  for (std::size_t i = 0; i < n.size(); ++i)
    std::fprintf(out, "# %10.0f %12.2f %12.2f %12.2f %12.2f %10.2f %10.2f\n", n[i], t_net[i] * 1e6,
                 (f.alpha + n[i] * (n[i] <= kCacheBytes ? f.beta_cache : f.beta_memory)) * 1e6,
                 t_rt[i] * 1e6, t_sum[i] * 1e6, n[i] / t_sum[i] * 1e-9, n[i] / t_copy[i] * 1e-9);
}

struct Case {
  std::string op;
  Direction dir;
  std::function<void()> run;
  double predicted_s;  // on this rank; the row reports the maximum over the ranks
};

std::int64_t local_bytes(const DistTensor<float>& t) {
  return t.local_numel() * static_cast<std::int64_t>(sizeof(float));
}

int run(const Settings& s) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_cost_model needs at least 2 ranks\n");
    return 1;
  }
  auto dup = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm rc = dup.get();
  if (rank == 0) {
    std::FILE* out = s.csv ? stderr : stdout;
    std::fprintf(out, "# bench_cost_model: %d ranks, float tensors, %s\n", size,
                 bench::mpi_library_version().c_str());
    // Other processes on the machine change these times by up to several times: say how busy it
    // was (the 1-, 5- and 15-minute load averages, where the system reports them).
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      double l1 = 0, l5 = 0, l15 = 0;
      if (std::fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3)
        std::fprintf(out, "# load average at start: %.2f %.2f %.2f\n", l1, l5, l15);
      std::fclose(f);
    }
  }
  // A fit taken while another process held a core can be nonsense (an 8 B message "taking" a
  // scheduler slice, a negative beta). Up to 3 fits; the first plausible one is used: beta > 0 in
  // both ranges and alpha below the one-way time of the smallest fitted size.
  constexpr int kFitTries = 3;
  Fit machine;
  for (int attempt = 1; attempt <= kFitTries; ++attempt) {
    machine = fit(rc, s, rank);
    if (machine.plausible()) break;
    if (rank == 0)
      std::fprintf(s.csv ? stderr : stdout, "# fit %d of %d implausible (alpha = %.1f us)%s\n",
                   attempt, kFitTries, machine.alpha * 1e6,
                   attempt < kFitTries ? ", fitting again" : "; used anyway");
  }
  if (rank == 0) machine.print(s.csv ? stderr : stdout);

  const bench::Table table({{"op", 14, true},
                            {"dir", 8, true},
                            {"bytes", 10},
                            {"ranks", 5},
                            {"measured_us", 12},
                            {"predicted_us", 13},
                            {"pred/meas", 9, false, 3},
                            {"pass", 4, true, 0, 2}});
  if (rank == 0) {
    if (s.csv) {
      std::printf("op,direction,bytes,ranks,measured_us,predicted_us\n");
    } else {
      std::printf(
          "# time = median over reps of the max over ranks; pass: |pred/meas - 1| <= %.2f\n",
          kTolerance);
      table.header();
    }
  }
  const Partition one = Partition::world(Shape{1}, {0});
  const Partition all = Partition::world(Shape{size});
  const auto plan = std::make_shared<const distop::BroadcastPlan>(one, all);

  int rows = 0, passed = 0;
  for (const auto bytes : sizes(s.min_bytes, s.max_bytes)) {
    const std::int64_t n = bytes / 4;
    const cost::Machine m = machine.at(bytes);
    std::vector<Case> cases;
    // Broadcast, SumReduce, AllSumReduce.
    const TensorSpace root_space(Shape{n}, one);
    const distop::Broadcast<float> bcast(plan, root_space);
    const distop::SumReduce<float> reduce(plan, root_space);
    const TensorSpace rep_space(all, distop::Decomposition::balanced(Shape{n}, Shape{size}, {-1}));
    const distop::AllSumReduce<float> allsum(rep_space, {0});
    DistTensor<float> x_in(root_space), x_out(root_space), y_in(bcast.range()),
        y_out(bcast.range()), a_in(rep_space), a_out(rep_space);
    bench::fill(x_in, 1.0f);
    bench::fill(y_in, 1.0f);
    bench::fill(a_in, 1.0f);
    cases.push_back({"Broadcast", Direction::kForward, [&] { bcast.forward(x_in, y_out); },
                     cost::broadcast(Direction::kForward, bytes, size, m)});
    cases.push_back({"Broadcast", Direction::kAdjoint, [&] { bcast.adjoint(y_in, x_out); },
                     cost::broadcast(Direction::kAdjoint, bytes, size, m)});
    cases.push_back({"SumReduce", Direction::kForward, [&] { reduce.forward(y_in, x_out); },
                     cost::sum_reduce(Direction::kForward, bytes, size, m)});
    cases.push_back({"SumReduce", Direction::kAdjoint, [&] { reduce.adjoint(x_in, y_out); },
                     cost::sum_reduce(Direction::kAdjoint, bytes, size, m)});
    cases.push_back({"AllSumReduce", Direction::kForward, [&] { allsum.forward(a_in, a_out); },
                     cost::all_sum_reduce(bytes, size, m)});
    cases.push_back({"AllSumReduce", Direction::kAdjoint, [&] { allsum.adjoint(a_in, a_out); },
                     cost::all_sum_reduce(bytes, size, m)});

    // The point-to-point plans. For a plan whose output is x -> y: the bytes of y this rank does
    // not receive are copied locally; `packed` adds the bytes packed or unpacked around messages;
    // `summed` the received bytes added into the output.
    auto p2p = [&](const std::string& op, Direction d, const CommStats& st, std::int64_t out_bytes,
                   std::int64_t packed, std::int64_t unpacked, bool sums,
                   std::function<void()> fn) {
      cost::LocalWork w;
      w.packed = packed;
      w.copied = std::max<std::int64_t>(0, out_bytes - st.bytes_received);
      w.unpacked = unpacked;
      w.summed = sums ? st.bytes_received : 0;
      cases.push_back({op, d, std::move(fn), cost::point_to_point_plan(st, w, m)});
    };
    const TensorSpace split(Shape{n}, Partition::world(Shape{size}));
    const distop::Gather<float> gather(split, 0);
    const distop::Scatter<float> scatter(split, 0);
    const distop::AllGather<float> all_gather(split, {0});
    const distop::ReduceScatter<float> reduce_scatter(split, {0});
    DistTensor<float> part_in(split), part_out(split), root_in(gather.range()),
        root_out(gather.range()), full_in(all_gather.range()), full_out(all_gather.range());
    bench::fill(part_in, 1.0f);
    bench::fill(root_in, 1.0f);
    bench::fill(full_in, 1.0f);
    const auto pb = local_bytes(part_out), rb = local_bytes(root_out), fb = local_bytes(full_out);
    p2p("Gather", Direction::kForward, gather.forward_stats(), rb, 0, 0, false,
        [&] { gather.forward(part_in, root_out); });
    p2p("Gather", Direction::kAdjoint, gather.adjoint_stats(), pb, 0, 0, false,
        [&] { gather.adjoint(root_in, part_out); });
    p2p("Scatter", Direction::kForward, scatter.forward_stats(), pb, 0, 0, false,
        [&] { scatter.forward(root_in, part_out); });
    p2p("Scatter", Direction::kAdjoint, scatter.adjoint_stats(), rb, 0, 0, false,
        [&] { scatter.adjoint(part_in, root_out); });
    p2p("AllGather", Direction::kForward, all_gather.forward_stats(), fb, 0, 0, false,
        [&] { all_gather.forward(part_in, full_out); });
    p2p("AllGather", Direction::kAdjoint, all_gather.adjoint_stats(), pb, 0, 0, true,
        [&] { all_gather.adjoint(full_in, part_out); });
    p2p("ReduceScatter", Direction::kForward, reduce_scatter.forward_stats(), pb, 0, 0, true,
        [&] { reduce_scatter.forward(full_in, part_out); });
    p2p("ReduceScatter", Direction::kAdjoint, reduce_scatter.adjoint_stats(), fb, 0, 0, false,
        [&] { reduce_scatter.adjoint(part_in, full_out); });

    // Repartition [R, C] from [P, 1] to [1, P]: forward packs what it sends (column blocks of
    // row blocks) and receives whole row ranges in place; the adjoint sends in place and unpacks.
    std::int64_t rows_r = 1;
    while (rows_r * rows_r < n) rows_r *= 2;
    const std::int64_t cols = n / rows_r;
    const TensorSpace by_rows(Shape{rows_r, cols}, Partition::world(Shape{size, 1}));
    const TensorSpace by_cols(Shape{rows_r, cols}, Partition::world(Shape{1, size}));
    const distop::Repartition<float> repart(by_rows, by_cols);
    DistTensor<float> r_x_in(by_rows), r_x_out(by_rows), r_y_in(by_cols), r_y_out(by_cols);
    bench::fill(r_x_in, 1.0f);
    bench::fill(r_y_in, 1.0f);
    const auto fst = repart.forward_stats(), ast = repart.adjoint_stats();
    p2p("Repartition", Direction::kForward, fst, local_bytes(r_y_out), fst.bytes_sent, 0, false,
        [&] { repart.forward(r_x_in, r_y_out); });
    p2p("Repartition", Direction::kAdjoint, ast, local_bytes(r_x_out), 0, ast.bytes_received, false,
        [&] { repart.adjoint(r_y_in, r_x_out); });

    // HaloExchange: the forward copies the padded array and receives the ghosts in place; the
    // adjoint copies it back, receives the ghosts' adjoints into a buffer and adds them.
    const std::int64_t hcols = n;  // bytes = ghost volume per rank = one row
    const TensorSpace interior(Shape{2 * size, hcols}, Partition::world(Shape{size, 1}));
    const std::vector<distop::ConvWindow> windows{{3, 1, 1, 1}, {1, 1, 0, 1}};
    const distop::HaloExchange<float> halo(interior, windows);
    DistTensor<float> h_in(halo.domain()), h_out(halo.domain()), h_yin(halo.domain()),
        h_xout(halo.domain());
    bench::fill(h_in, 1.0f);
    bench::fill(h_yin, 1.0f);
    const auto hb = local_bytes(h_out);
    {
      const auto st = halo.forward_stats();
      cases.push_back({"HaloExchange", Direction::kForward, [&] { halo.forward(h_in, h_out); },
                       cost::point_to_point_plan(st, {hb, 0, 0, 0}, machine.at(hb))});
      const auto sa = halo.adjoint_stats();
      cases.push_back(
          {"HaloExchange", Direction::kAdjoint, [&] { halo.adjoint(h_yin, h_xout); },
           cost::point_to_point_plan(sa, {hb, 0, 0, sa.bytes_received}, machine.at(hb))});
    }

    // SendRecv: one message, rank 0 -> rank 1 (adjoint: back).
    const distop::SendRecv<float> sr(MPI_COMM_WORLD, Shape{n}, 0, 1);
    DistTensor<float> s_x(sr.domain()), s_y(sr.range()), s_yin(sr.range()), s_xout(sr.domain());
    bench::fill(s_x, 1.0f);
    bench::fill(s_yin, 1.0f);
    cases.push_back({"SendRecv", Direction::kForward, [&] { sr.forward(s_x, s_y); },
                     cost::point_to_point_plan(sr.forward_stats(), {}, m)});
    cases.push_back({"SendRecv", Direction::kAdjoint, [&] { sr.adjoint(s_yin, s_xout); },
                     cost::point_to_point_plan(sr.adjoint_stats(), {}, m)});

    for (const auto& c : cases) {
      const double measured = measure(rc, s, c.run);
      double predicted = c.predicted_s;
      DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &predicted, 1, MPI_DOUBLE, MPI_MAX, rc),
                       "bench");
      const double ratio = predicted / measured;
      const bool pass = std::abs(ratio - 1) <= kTolerance;
      ++rows;
      if (pass) ++passed;
      if (rank != 0) continue;
      const char* dir = c.dir == Direction::kForward ? "forward" : "adjoint";
      if (s.csv) {
        std::printf("%s,%s,%lld,%d,%.3f,%.3f\n", c.op.c_str(), dir, static_cast<long long>(bytes),
                    size, measured * 1e6, predicted * 1e6);
      } else {
        table.row({c.op, std::string(dir), static_cast<long long>(bytes),
                   static_cast<long long>(size), measured * 1e6, predicted * 1e6, ratio,
                   std::string(pass ? "pass" : "FAIL")});
      }
      std::fflush(stdout);
    }
  }
  if (rank == 0 && !s.csv)
    std::printf("# %d of %d rows within %.0f %%\n", passed, rows, kTolerance * 100);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distop::Environment env(argc, argv);
  Settings s;
  CLI::App app{"Fits alpha, beta, gamma and compares distop's operators with the cost model"};
  app.add_option("--reps", s.reps, "repetitions per case and size")
      ->check(CLI::Range(kMinRepsHere, 1000000));
  app.add_option("--budget", s.budget_s, "seconds per case and size before reps are cut")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--min-bytes", s.min_bytes, "smallest tensor in bytes (a power of 4 >= 1 KiB)");
  app.add_option("--max-bytes", s.max_bytes, "largest tensor in bytes")
      ->check(CLI::Range(std::int64_t{64 << 10}, std::int64_t{1} << 30));
  app.add_flag("--csv", s.csv, "print op,direction,bytes,ranks,measured_us,predicted_us rows");
  if (const auto code = bench::parse_args(app, argc, argv)) return *code;
  return bench::run_or_abort([&] { return run(s); });
}
