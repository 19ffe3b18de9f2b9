// bench_simulated: the programs that scripts/simulate.sh runs under SimGrid's SMPI (and that run
// under mpiexec alike): a few steps of one of
//   primitives     distop's AllSumReduce, Broadcast (forward and adjoint) and HaloExchange on a
//                  fixed number of bytes per rank (weak scaling),
//   lenet5         examples/lenet5's training step, model parallel over --model-ranks ranks per
//                  replica, data parallel over the replicas (DataParallel), batch --batch per
//                  replica,
//   unet3d         examples/unet3d's training step (BCE with logits + soft Dice, Adam) with every
//                  layer on a spatial grid of --model-ranks ranks per replica (0: all ranks, one
//                  replica), data parallel over the replicas; weak scaling: each rank keeps a
//                  block of --volume-per-rank^3 voxels (default 16), so the volume is that block
//                  times the grid (examples::unet_grid) and grows with the ranks; --batch volumes
//                  per replica (default 2 for this program); --compute injected charges each
//                  operation's compute from a profile of one rank's block (op_compute.hpp; SMPI
//                  build only), every message real,
//   data_parallel  examples/cnn's data-parallel step (one replica per rank, batch --batch per
//                  rank), the gradients reduced in buckets overlapped with backward, and the same
//                  step without the reduction (the compute it hides behind),
//   attention      nn::SequenceParallelAttention's forward and backward (--strategies ring,alltoall)
//                  on q, k, v [1, --heads, P --tokens-per-rank, --head-dim] split along the
//                  sequence over all P ranks (weak scaling in tokens: the ideal step grows as P);
//                  the all-to-all only while heads >= P. --compute injected (SMPI build only)
//                  charges each ring block's measured time where the ring computes it, between
//                  posting the next transfer and waiting for it, and the all-to-all's local
//                  operations per operation (attention_sim.hpp), every message real,
//   round_trip     what a rank's host time between MPI calls costs in the simulation: ranks paired
//                  (r, r ^ 1), each step 1,000 rounds of an 8-byte irecv, isend and two waits,
//                  once through MPI directly and once through distop's comm::irecv/isend and
//                  Request::wait (so a step's time in ms is the time per round in us),
// each timed with MPI_Wtime (the simulated clock under SMPI: std::chrono reads the host's), a step
// being the slowest rank's time after a barrier, the median over --steps steps after --warmup.
//
//   smpirun ... build-smpi/benchmarks/bench_simulated --program data_parallel --steps 3
//   mpiexec.mpich -n 2 build/benchmarks/bench_simulated --program lenet5
//
// Output: one CSV row per measurement,
//   program,case,ranks,step_ms,model_ms,detail
// with model_ms the cost model's time (ops/cost_model.hpp) on the machine given by --alpha,
// --beta, --gamma and --copy (the platform's links): for the primitives the operator's predicted
// time; for data_parallel the compute-only step measured in the same run plus the predicted
// reduction that overlap cannot hide (the last bucket's), and plus all of it (no overlap) in the
// case "model-no-overlap"; for round_trip 1,000 times the latency plus 8 bytes; for lenet5 empty
// (its communication is inside the model-parallel step), and for unet3d likewise; for attention
// (with a ring profile: --compute injected) bench_step_model's projection of the same step from the
// same block times (ring: each block's compute against the transfer of the next; all-to-all: P
// blocks' compute plus eight all-to-alls).
// At one rank data_parallel also prints the cases "projection" and "projection-no-overlap" at
// 1-1,024 ranks: that rank's compute plus the model's reduction of the same buckets over P
// replicas (step_ms empty).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <distop/distop.hpp>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../examples/lenet5/model.hpp"
#include "../examples/unet3d/model.hpp"
#include "attention_sim.hpp"
#include "bench_mpi.hpp"
#include "bench_util.hpp"
#include "cnn_step.hpp"  // examples/cnn's model, by path (examples/lenet5's has the same name)
#include "distop/ops/cost_model.hpp"
#include "injected_compute.hpp"
#include "op_compute.hpp"

namespace {

using namespace distop;

struct Settings {
  std::string program = "data_parallel";
  int steps = 3;
  int warmup = 1;
  std::int64_t batch = 64;
  int model_ranks = 2;
  std::int64_t volume_per_rank = 16;  // unet3d
  std::int64_t bytes = 1 << 20;
  std::size_t bucket_kib = 0;          // 0: DataParallel's default caps
  std::string exchange = "automatic";  // DataParallelOptions::exchange
  int exchange_window = 32;            // its window of pairwise rounds
  bool injected = false;               // data_parallel: --compute injected
  std::string compute_profile;  // --compute-profile: replayed if it exists, else measured to it
  bench::AttentionShape attention;          // attention
  std::string strategies = "ring,alltoall";  // attention
  double compute_speedup = 1;               // attention, injected: block times divided by this
  int profile_ranks = 0;  // attention: only measure the profiles for this many ranks, and save them
  cost::Machine machine{1e-6, 1.0 / 25e9, 1.0 / 10e9, 1.0 / 20e9};
};

parallel::DataParallelOptions data_parallel_options(const Settings& s) {
  parallel::DataParallelOptions o;
  if (s.bucket_kib > 0) o.first_bucket_bytes = o.bucket_bytes = s.bucket_kib << 10;
  using Exchange = parallel::DataParallelOptions::Exchange;
  o.exchange = s.exchange == "collective" ? Exchange::collective
               : s.exchange == "pairwise" ? Exchange::pairwise
                                          : Exchange::automatic;
  o.exchange_window = s.exchange_window;
  return o;
}

// Median over `steps` of the slowest rank's time of fn (after `warmup` untimed calls), in ms.
double time_steps(const Settings& s, const std::function<void()>& fn) {
  for (int i = 0; i < s.warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < s.steps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    times.push_back(bench::max_over_ranks(MPI_Wtime() - t0));
  }
  return bench::median(times) * 1e3;
}

void row(const std::string& program, const std::string& what, int ranks, double step_ms,
         double model_ms, const std::string& detail) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  if (model_ms >= 0)
    std::printf("%s,%s,%d,%.4f,%.4f,%s\n", program.c_str(), what.c_str(), ranks, step_ms, model_ms,
                detail.c_str());
  else
    std::printf("%s,%s,%d,%.4f,,%s\n", program.c_str(), what.c_str(), ranks, step_ms,
                detail.c_str());
  std::fflush(stdout);
}

void run_primitives(const Settings& s, int ranks) {
  using cost::Direction;
  const std::int64_t n = s.bytes / 4;
  const Partition one = Partition::world(Shape{1}, {0});
  const Partition all = Partition::world(Shape{ranks});
  const auto plan = std::make_shared<const BroadcastPlan>(one, all);
  const TensorSpace root_space(Shape{n}, one);
  const Broadcast<float> bcast(plan, root_space);
  // AllSumReduce of a vector replicated on every rank: s.bytes on each.
  const TensorSpace rep_space(all, Decomposition::balanced(Shape{n}, Shape{ranks}, {-1}));
  const AllSumReduce<float> allsum(rep_space, {0});
  DistTensor<float> x_in(root_space), x_out(root_space), y_in(bcast.range()), y_out(bcast.range()),
      a_in(rep_space), a_out(rep_space);
  bench::fill(x_in, 1.0f);
  bench::fill(y_in, 1.0f);
  bench::fill(a_in, 1.0f);
  // HaloExchange: two rows of n entries per rank, one ghost row each side (a 3-tap window).
  const TensorSpace interior(Shape{2 * ranks, n}, Partition::world(Shape{ranks, 1}));
  const std::vector<ConvWindow> windows{{3, 1, 1, 1}, {1, 1, 0, 1}};
  const HaloExchange<float> halo(interior, windows);
  DistTensor<float> h_in(halo.domain()), h_out(halo.domain());
  bench::fill(h_in, 1.0f);
  const std::int64_t hb = h_out.local_numel() * 4;
  const auto& m = s.machine;
  const std::string detail = std::to_string(s.bytes) + " B per rank";
  row("primitives", "AllSumReduce", ranks, time_steps(s, [&] { allsum.forward(a_in, a_out); }),
      cost::all_sum_reduce(s.bytes, ranks, m) * 1e3, detail);
  row("primitives", "Broadcast", ranks, time_steps(s, [&] { bcast.forward(x_in, y_out); }),
      cost::broadcast(Direction::kForward, s.bytes, ranks, m) * 1e3, detail);
  row("primitives", "Broadcast.adjoint", ranks, time_steps(s, [&] { bcast.adjoint(y_in, x_out); }),
      cost::broadcast(Direction::kAdjoint, s.bytes, ranks, m) * 1e3, detail);
  row("primitives", "HaloExchange", ranks, time_steps(s, [&] { halo.forward(h_in, h_out); }),
      cost::point_to_point_plan(halo.forward_stats(), {hb, 0, 0, 0}, m) * 1e3,
      std::to_string(n * 4) + " B per ghost row");
}

// 1,000 rounds of an 8-byte exchange between ranks r and r ^ 1 (a rank without a partner, the last
// of an odd count, sits out), raw MPI and through distop. Under SMPI the time per round is the
// network's latency plus the host time charged between the MPI calls, which grows with the ranks
// the process simulates (docs/scaling.md); the model is the cost model's latency plus 8 bytes.
void run_round_trip(const Settings& s, int ranks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int peer = rank ^ 1;
  const bool paired = peer < ranks;
  constexpr int kRounds = 1000;
  float send[2] = {1, 2}, recv[2] = {0, 0};
  const double model_ms = kRounds * (s.machine.alpha + 8 * s.machine.beta) * 1e3;
  const std::string detail = "1000 rounds of 8 B between ranks r and r ^ 1";
  auto per_round = [&](const std::function<void()>& round) {
    return time_steps(s, [&] {
      for (int i = 0; paired && i < kRounds; ++i) round();
    });
  };
  row("round_trip", "mpi", ranks, per_round([&] {
        MPI_Request q[2];
        MPI_Irecv(recv, 2, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(send, 2, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, &q[1]);
        MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        MPI_Wait(&q[1], MPI_STATUS_IGNORE);
      }),
      model_ms, detail);
  row("round_trip", "distop", ranks, per_round([&] {
        comm::Request received = comm::irecv(recv, 2, peer, 0, MPI_COMM_WORLD);
        comm::Request sent = comm::isend(send, 2, peer, 0, MPI_COMM_WORLD);
        received.wait();
        sent.wait();
      }),
      model_ms, detail);
}

void run_lenet5(const Settings& s, int ranks) {
  DISTOP_CHECK(s.model_ranks == 1 || s.model_ranks == 2 || s.model_ranks == 4 || s.model_ranks == 8,
               "bench_simulated", "lenet5: --model-ranks must be 1, 2, 4 or 8, not ",
               s.model_ranks);
  const int model_ranks = std::min(s.model_ranks, ranks);
  parallel::Replicas replicas(MPI_COMM_WORLD, ranks / model_ranks);
  examples::LeNet5 model(1, replicas.model_comm());
  DistTensor<float> x(model.input_space(s.batch));
  nn::uniform_init(x, 7, 0.5);
  std::vector<std::int32_t> labels;
  if (model.holds_output())
    for (std::int64_t i = 0; i < s.batch; ++i) labels.push_back(static_cast<std::int32_t>(i % 10));
  optim::SGD<float> opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  parallel::DataParallel<float> dp(model, replicas, data_parallel_options(s));
  const double ms = time_steps(s, [&] {
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    auto loss = loss::cross_entropy(tape, logits, labels);
    dp.backward(tape, loss);
    opt.step();
    opt.zero_grad();
  });
  row("lenet5", "step", ranks, ms, -1,
      std::to_string(model_ranks) + " ranks per replica, batch " + std::to_string(s.batch) +
          " per replica");
}

// --compute injected: the op profile of examples/unet3d's step on one rank's block, measured by
// rank 0 alone on a one-rank model (MPI_COMM_SELF) or read from --compute-profile, and sent to
// every rank (op_compute.hpp).
bench::OpProfile unet3d_op_profile(const Settings& s) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bench::OpProfile profile;
  if (rank == 0) {
    if (!s.compute_profile.empty() && std::ifstream(s.compute_profile)) {
      profile = bench::OpProfile::load(s.compute_profile);
    } else {
      const std::int64_t b = s.volume_per_rank;
      const Shape block{b, b, b};
      examples::UNet3d model(block, {}, MPI_COMM_SELF);
      DistTensor<float> x(model.input_space(s.batch)), y(x.space());
      examples::SyntheticVolumes(block, 1001).fill(0, x, y);
      optim::Adam<float> opt(model.parameters(), {.lr = 1e-3});
      profile = bench::measure_ops(
          [&] {
            Tape tape;
            auto logits = model.forward(tape, Var<float>(x));
            auto loss = nn::add(tape, loss::bce_with_logits(tape, logits, y),
                                loss::dice(tape, nn::sigmoid(tape, logits), y));
            distop::backward(tape, loss);
            const double t0 = bench::thread_cpu_seconds();
            opt.step();
            opt.zero_grad();
            return bench::thread_cpu_seconds() - t0;
          },
          2, 5);
      if (!s.compute_profile.empty()) profile.save(s.compute_profile);
    }
  }
  return bench::OpProfile::broadcast(profile, 0, MPI_COMM_WORLD);
}

// examples/unet3d's step: every layer on unet_grid(model ranks) of each replica's ranks, each rank
// a volume_per_rank^3 block of every volume, the gradients reduced over the replicas by
// DataParallel. Injected (s.injected): every operation's compute replayed from the op profile
// (op_compute.hpp), the optimizer step and the rest of the step after the optimizer.
void run_unet3d(const Settings& s, int ranks) {
#ifndef DISTOP_SMPI
  // Checked on every rank alike (the same arguments): the op hook exists in the SMPI build only.
  DISTOP_CHECK(!s.injected, "bench_simulated",
               "unet3d --compute injected needs the SMPI build (scripts/simulate.sh)");
#endif
  // Fewer ranks than --model-ranks (a series' base run): one replica of all of them.
  const int model_ranks = s.model_ranks == 0 ? ranks : std::min(s.model_ranks, ranks);
  DISTOP_CHECK(ranks % model_ranks == 0, "bench_simulated", "unet3d: --model-ranks (", model_ranks,
               ") must divide the ranks (", ranks, ")");
  DISTOP_CHECK(s.volume_per_rank % 4 == 0, "bench_simulated",
               "unet3d: --volume-per-rank must be a multiple of 4, not ", s.volume_per_rank);
  const bench::OpProfile profile = s.injected ? unet3d_op_profile(s) : bench::OpProfile{};
  parallel::Replicas replicas(MPI_COMM_WORLD, ranks / model_ranks);
  const Shape g = examples::unet_grid(model_ranks);
  const std::int64_t b = s.volume_per_rank;
  const Shape volume{b * g[2], b * g[3], b * g[4]};
  examples::UNet3d model(volume, {}, replicas.model_comm());
  DistTensor<float> x(model.input_space(s.batch)), y(x.space());
  examples::SyntheticVolumes(volume, 1001).fill(replicas.index() * s.batch, x, y);
  optim::Adam<float> opt(model.parameters(), {.lr = 1e-3});
  parallel::DataParallel<float> dp(model, replicas, data_parallel_options(s));
  auto& injection = bench::OpInjection::instance();
  const double ms = time_steps(s, [&] {
    if (s.injected) injection.begin_step(bench::OpInjection::Mode::inject, &profile);
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    auto loss = nn::add(tape, loss::bce_with_logits(tape, logits, y),
                        loss::dice(tape, nn::sigmoid(tape, logits), y));
    dp.backward(tape, loss);
    if (s.injected) injection.end_step();
    opt.step();
    opt.zero_grad();
    if (s.injected) bench::inject_compute(profile.optimizer_seconds + profile.rest_seconds);
  });
  std::string compute = "compute measured";
  if (s.injected) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "compute injected (forward %.2f ms in %zu operations; backward %.2f ms in %zu "
                  "entries; optimizer %.2f ms; rest %.2f ms)",
                  bench::OpProfile::total(profile.forward) * 1e3, profile.forward.size(),
                  bench::OpProfile::total(profile.backward) * 1e3, profile.backward.size(),
                  profile.optimizer_seconds * 1e3, profile.rest_seconds * 1e3);
    compute = buf;
  }
  row("unet3d", "step", ranks, ms, -1,
      compute + "; grid " + std::to_string(g[2]) + "x" + std::to_string(g[3]) + "x" +
          std::to_string(g[4]) + " per replica, " + std::to_string(ranks / model_ranks) +
          " replicas, volume " + volume.str() + ", " + std::to_string(b) +
          "^3 voxels per rank, batch " + std::to_string(s.batch) + " per replica");
}

// --program attention, injected: the ring's block profile, measured by rank 0 on one rank or read
// from --compute-profile (so that a series replays one measurement), sent to every rank.
bench::RingProfile attention_ring_profile(const Settings& s) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bench::RingProfile p;
  if (rank == 0) {
    if (!s.compute_profile.empty() && std::ifstream(s.compute_profile)) {
      p = bench::RingProfile::load(s.compute_profile);
    } else {
      p = bench::measure_ring_block(s.attention, 2, 7);
      if (!s.compute_profile.empty()) p.save(s.compute_profile);
    }
  }
  return bench::RingProfile::broadcast(p, 0, MPI_COMM_WORLD);
}

// The all-to-all's local share at P ranks: H/P heads over the whole sequence of P blocks, as a
// one-rank model on MPI_COMM_SELF.
bench::OpProfile measure_alltoall_ops(const Settings& s, int ranks) {
  const TensorSpace space = bench::attention_space(
      Partition::self(Shape{1}),
      {.block = s.attention.block * ranks, .heads = s.attention.heads, .dim = s.attention.dim},
      s.attention.heads / ranks);
  const nn::SequenceParallelAttention<float> attention(
      space, {.strategy = nn::SequenceParallelStrategy::alltoall});
  Var<float> q(bench::attention_input(space, 1), true), k(bench::attention_input(space, 2), true),
      v(bench::attention_input(space, 3), true);
  const DistTensor<float> dy = bench::attention_input(space, 4);
  return bench::measure_ops(
      [&] {
        Tape tape;
        for (auto* x : {&q, &k, &v}) x->zero_grad();
        Var<float> y = attention.forward(tape, q, k, v);
        backward(tape, y, dy);
        return 0.0;
      },
      2, 5);
}

// The all-to-all's op profile at `ranks`: read from --compute-profile's file with
// ".alltoall.<ranks>" appended if it exists, else measured by rank 0 (and saved there); sent to
// every rank.
bench::OpProfile attention_alltoall_profile(const Settings& s, int ranks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bench::OpProfile p;
  const std::string path =
      s.compute_profile.empty() ? "" : s.compute_profile + ".alltoall." + std::to_string(ranks);
  if (rank == 0) {
    if (!path.empty() && std::ifstream(path)) {
      p = bench::OpProfile::load(path);
    } else {
      p = measure_alltoall_ops(s, ranks);
      if (!path.empty()) p.save(path);
    }
  }
  return bench::OpProfile::broadcast(p, 0, MPI_COMM_WORLD);
}

// Sequence-parallel attention over all the ranks, forward and backward, per strategy. Injected
// (s.injected): the ring's blocks charged by the ring-block hook (checked: 2 P blocks a step), the
// all-to-all's local operations by the op hook; every message real either way.
void run_attention(const Settings& s, int ranks) {
#ifndef DISTOP_SMPI
  DISTOP_CHECK(!s.injected && s.profile_ranks == 0, "bench_simulated",
               "attention --compute injected needs the SMPI build (scripts/simulate.sh)");
#endif
  const bench::AttentionShape& a = s.attention;
  DISTOP_CHECK(s.compute_speedup > 0, "bench_simulated",
               "attention: --compute-speedup must be positive, not ", s.compute_speedup);
  const std::vector<std::string> strategies = bench::split_list(s.strategies);
  if (s.profile_ranks > 0) {  // one rank: measure and save the profiles only
    DISTOP_CHECK(ranks == 1 && !s.compute_profile.empty(), "bench_simulated",
                 "attention: --profile-ranks runs on one rank and needs --compute-profile");
    attention_ring_profile(s);
    if (a.heads >= s.profile_ranks && a.heads % s.profile_ranks == 0 &&
        std::find(strategies.begin(), strategies.end(), "alltoall") != strategies.end())
      attention_alltoall_profile(s, s.profile_ranks);
    return;
  }
  std::optional<bench::RingProfile> profile;
  if (s.injected) profile = attention_ring_profile(s);
  const Partition world = Partition::world(Shape{ranks});
  const TensorSpace space = bench::attention_space(world, a, a.heads);
  Var<float> q(bench::attention_input(space, 1), true), k(bench::attention_input(space, 2), true),
      v(bench::attention_input(space, 3), true);
  const DistTensor<float> dy = bench::attention_input(space, 4);
  const double block_bytes = 4.0 * static_cast<double>(a.heads * a.block * a.dim);
  for (const std::string& name : strategies) {
    const auto strategy = nn::parse_sequence_parallel_strategy(name);
    const bool ring = strategy == nn::SequenceParallelStrategy::ring;
    // The all-to-all splits the heads in equal shares over the ranks.
    if (!ring && (a.heads < ranks || a.heads % ranks != 0)) continue;
    const nn::SequenceParallelAttention<float> attention(
        space, {.sequence_axis = 0, .strategy = strategy});
    bench::OpProfile ops;
    if (s.injected && !ring) {
      ops = attention_alltoall_profile(s, ranks);
      for (auto* part : {&ops.forward, &ops.backward})
        for (auto& op : *part) op.seconds /= s.compute_speedup;
    }
    auto& ring_injection = bench::RingInjection::instance();
    auto& op_injection = bench::OpInjection::instance();
    const double ms = time_steps(s, [&] {
      Tape tape;
      for (auto* x : {&q, &k, &v}) x->zero_grad();
      if (s.injected && ring) {
        ring_injection.start(*profile, s.compute_speedup, a.heads, a.block);
        ring_injection.pass(false);
      }
      if (s.injected && !ring) op_injection.begin_step(bench::OpInjection::Mode::inject, &ops);
      Var<float> y = attention.forward(tape, q, k, v);
      if (s.injected && ring) ring_injection.pass(true);
      backward(tape, y, dy);
      if (s.injected && !ring) op_injection.end_step();
      if (s.injected && ring) {
        ring_injection.stop();
        const std::int64_t blocks = ring_injection.take_blocks();
        DISTOP_CHECK(blocks == 2 * ranks, "bench_simulated", "the injected ring charged ", blocks,
                     " blocks in a step of ", ranks, " ranks, not ", 2 * ranks);
      }
    });
    // bench_step_model's projection of the same step from the same block times.
    double model_ms = -1;
    std::string compute = "compute measured";
    char buf[240];
    if (profile) {
      const double f = profile->forward_total() / s.compute_speedup;
      const double b = profile->backward_total() / s.compute_speedup;
      const int p = ranks;
      const double kv =
          cost::point_to_point(static_cast<std::int64_t>(2 * block_bytes), s.machine).seconds;
      const auto share = static_cast<std::int64_t>(block_bytes * (p - 1) / p);
      model_ms = 1e3 * (ring ? (p - 1) * std::max(f, kv) + f + (p - 1) * std::max(b, 2 * kv) + b
                             : p * (f + b) + (p > 1 ? 8 * cost::alltoallv(share, share, p - 1,
                                                                          s.machine)
                                                              .seconds
                                                    : 0.0));
      if (ring)
        std::snprintf(buf, sizeof buf,
                      "compute injected (a block forward %.3f + once %.3f ms, backward %.3f + "
                      "once %.3f ms, divided by %g)",
                      profile->forward_block * 1e3, profile->forward_once * 1e3,
                      profile->backward_block * 1e3, profile->backward_once * 1e3,
                      s.compute_speedup);
      else
        std::snprintf(buf, sizeof buf,
                      "compute injected (forward %.2f ms in %zu operations; backward %.2f ms in "
                      "%zu entries, divided by %g)",
                      bench::OpProfile::total(ops.forward) * 1e3, ops.forward.size(),
                      bench::OpProfile::total(ops.backward) * 1e3, ops.backward.size(),
                      s.compute_speedup);
      compute = buf;
    }
    std::snprintf(buf, sizeof buf, "; %lld tokens per rank (sequence %lld), %lld heads of %lld",
                  static_cast<long long>(a.block), static_cast<long long>(a.block * ranks),
                  static_cast<long long>(a.heads), static_cast<long long>(a.dim));
    row("attention", name, ranks, ms, model_ms, compute + buf);
  }
}

void run_data_parallel(const Settings& s, int ranks) {
  parallel::Replicas replicas(MPI_COMM_WORLD, ranks);
  examples::ConvNet model(1, 28, 28, 1, replicas.model_comm());
  const bench::CnnBatch data(model, s.batch);
  optim::SGD<float> opt(model.parameters(), {.lr = 1e-4, .momentum = 0.9});
  auto real_forward = [&](Tape& tape) { return data.loss(tape, model); };
  // --compute injected: rank 0 measures the real forward and backward (before DataParallel sets
  // its hooks), every rank replays that profile as injected compute (injected_compute.hpp).
  std::unique_ptr<bench::InjectedStep> injected;
  if (s.injected) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    bench::ComputeProfile profile;
    if (rank == 0) {
      if (!s.compute_profile.empty() && std::ifstream(s.compute_profile)) {
        profile = bench::ComputeProfile::load(s.compute_profile);
      } else {
        profile = bench::measure_compute(model.parameters(), real_forward, 2, 7);
        if (!s.compute_profile.empty()) profile.save(s.compute_profile);
      }
    }
    injected = std::make_unique<bench::InjectedStep>(
        model.parameters(), bench::ComputeProfile::broadcast(profile, 0, MPI_COMM_WORLD));
  }
  parallel::DataParallel<float> dp(model, replicas, data_parallel_options(s));
  auto step = [&](bool reduce) {
    Tape tape;
    auto loss = injected ? injected->forward(tape) : real_forward(tape);
    bench::finish_step(dp, tape, loss, reduce, opt);
  };
  const double compute_ms = time_steps(s, [&] { step(false); });
  const double step_ms = time_steps(s, [&] { step(true); });
  // DataParallel's buckets (parallel/gradient_reducer.cpp): each reduce-scattered as an
  // all-to-all of its R chunks (MPI_Ialltoallv), the R received chunks summed, and the sums
  // all-gathered (MPI_Iallgatherv). The last bucket to become ready (the first layers', at the end
  // of backward) cannot overlap any compute; the others can.
  auto bucket_ms = [&](std::int64_t b, int r) {
    if (r == 1) return 0.0;
    const std::int64_t chunk = b / r;
    const auto& m = s.machine;
    return (cost::alltoallv(chunk * (r - 1), chunk * (r - 1), r - 1, m).seconds +
            m.gamma * static_cast<double>(chunk) * (r - 1) + cost::allgather(b, r, m).seconds) *
           1e3;
  };
  const auto buckets = dp.buckets();
  auto last_and_all_ms = [&](int r) {
    double all = 0;
    for (const auto& b : buckets) all += bucket_ms(static_cast<std::int64_t>(b.bytes), r);
    const double last =
        buckets.empty() ? 0.0 : bucket_ms(static_cast<std::int64_t>(buckets.back().bytes), r);
    return std::pair<double, double>{last, all};
  };
  std::size_t bytes = 0;
  for (const auto& b : buckets) bytes += b.bytes;
  const auto [last_ms, all_ms] = last_and_all_ms(ranks);
  std::string sizes;
  for (const auto& b : buckets) sizes += (sizes.empty() ? "" : "+") + std::to_string(b.bytes);
  std::string compute = "compute measured";
  if (injected) {
    const auto& p = injected->profile();
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "compute injected (forward %.2f ms; backward %.2f ms in %zu entries)",
                  p.forward_seconds * 1e3, p.backward_seconds() * 1e3, p.entry_seconds.size());
    compute = buf;
  }
  const std::string detail = compute + "; batch " + std::to_string(s.batch) + " per rank; " +
                             std::to_string(buckets.size()) + " buckets (" + sizes + " B); " +
                             std::to_string(bytes) + " B of gradients";
  row("data_parallel", "compute", ranks, compute_ms, compute_ms, detail);
  row("data_parallel", "step", ranks, step_ms, compute_ms + last_ms, detail);
  row("data_parallel", "model-no-overlap", ranks, step_ms, compute_ms + all_ms, detail);
  // At one rank, the model's projection of this step to larger clusters: this compute, and the
  // same buckets reduced over P replicas, the last one after backward (the rest hidden).
  if (ranks == 1) {
    for (const int p : {1, 2, 8, 64, 256, 1024}) {
      const auto [last, all] = last_and_all_ms(p);
      std::printf("data_parallel,projection,%d,,%.4f,%s\n", p, compute_ms + last, detail.c_str());
      std::printf("data_parallel,projection-no-overlap,%d,,%.4f,%s\n", p, compute_ms + all,
                  detail.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  Settings s;
  double bandwidth_gbs = 25.0, alpha_us = 1.0, gamma_gbs = 10.0, copy_gbs = 20.0;
  CLI::App app{"Steps of distop's programs for simulated runs (SimGrid SMPI) and measured runs"};
  app.add_option("--program", s.program,
                 "primitives | lenet5 | data_parallel | round_trip | unet3d | attention")
      ->check(CLI::IsMember(
          {"primitives", "lenet5", "data_parallel", "round_trip", "unet3d", "attention"}))
      ->capture_default_str();
  app.add_option("--steps", s.steps, "Timed steps (median)")->capture_default_str();
  app.add_option("--warmup", s.warmup, "Untimed steps first")->capture_default_str();
  auto* batch = app.add_option("--batch", s.batch,
                               "Examples per replica (weak scaling: fixed; unet3d: volumes, "
                               "default 2)")
                    ->capture_default_str();
  app.add_option("--model-ranks", s.model_ranks,
                 "lenet5: ranks per model-parallel replica (1, 2, 4 or 8); unet3d: ranks of a "
                 "replica's spatial grid (0: all ranks; default 0 for unet3d)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* model_ranks = app.get_option("--model-ranks");
  app.add_option("--volume-per-rank", s.volume_per_rank,
                 "unet3d: each rank's block, S^3 voxels (a multiple of 4)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--tokens-per-rank", s.attention.block, "attention: each rank's block of tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heads", s.attention.heads, "attention: heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--head-dim", s.attention.dim, "attention: head dimension")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--strategies", s.strategies,
                 "attention: comma-separated, ring and/or alltoall (the all-to-all only while "
                 "heads >= ranks)")
      ->capture_default_str();
  app.add_option("--compute-speedup", s.compute_speedup,
                 "attention with --compute injected: divide the measured compute by this (a "
                 "device this many times faster, the same network)")
      ->capture_default_str();
  app.add_option("--profile-ranks", s.profile_ranks,
                 "attention: on one rank, measure the ring's block profile and the all-to-all's op "
                 "profile for this many ranks into --compute-profile(.alltoall.P), and stop")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", s.bytes, "primitives: bytes per rank")->capture_default_str();
  app.add_option("--bucket-kib", s.bucket_kib,
                 "lenet5, data_parallel: DataParallel's bucket cap in KiB (0: its defaults, 1 MiB "
                 "first, 25 MiB others)")
      ->capture_default_str();
  app.add_option(
         "--exchange", s.exchange,
         "lenet5, data_parallel: how the buckets' chunks move (DataParallelOptions::exchange): "
         "collective (MPI_Ialltoallv/Iallgatherv), pairwise (point-to-point rounds, "
         "--exchange-window in flight) or automatic (pairwise once replicas - 1 exceed the "
         "window)")
      ->check(CLI::IsMember({"automatic", "collective", "pairwise"}))
      ->capture_default_str();
  app.add_option("--exchange-window", s.exchange_window,
                 "lenet5, data_parallel: pairwise rounds in flight")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--alpha-us", alpha_us, "Cost model: latency per message (us)")
      ->capture_default_str();
  app.add_option("--bandwidth-gbs", bandwidth_gbs, "Cost model: link bandwidth (GB/s)")
      ->capture_default_str();
  app.add_option("--gamma-gbs", gamma_gbs, "Cost model: local reduction rate (GB/s)")
      ->capture_default_str();
  app.add_option("--copy-gbs", copy_gbs, "Cost model: local copy rate (GB/s)")
      ->capture_default_str();
  std::string compute = "measured";
  app.add_option("--compute", compute,
                 "data_parallel, unet3d, attention: measured (every rank computes; SMPI charges "
                 "its host time) or injected (data_parallel: rank 0 measures forward and backward once, "
                 "every rank replays them as simulated compute; unet3d: rank 0 measures each "
                 "operation's compute on a one-rank model of one block, every rank injects it "
                 "after the operation, the messages real; attention: each ring block's measured "
                 "time charged where the ring computes it, the all-to-all's per operation)")
      ->check(CLI::IsMember({"measured", "injected"}))
      ->capture_default_str();
  app.add_option("--compute-profile", s.compute_profile,
                 "data_parallel, unet3d, attention with --compute injected: replay the compute "
                 "(or op, or ring block) profile in this file if it exists, else measure it and "
                 "write it there (so that the runs of a series replay one measurement)");
  bool header = false;
  app.add_flag("--header", header, "Print the CSV header first");
  if (auto code = bench::parse_args(app, argc, argv)) return *code;
  s.injected = compute == "injected";
  if (s.program == "unet3d") {
    if (batch->count() == 0) s.batch = 2;
    if (model_ranks->count() == 0) s.model_ranks = 0;
  }
  s.machine = {alpha_us * 1e-6, 1e-9 / bandwidth_gbs, 1e-9 / gamma_gbs, 1e-9 / copy_gbs};
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (header && rank == 0) std::printf("program,case,ranks,step_ms,model_ms,detail\n");
  return bench::run_or_abort([&] {
    if (s.program == "primitives")
      run_primitives(s, ranks);
    else if (s.program == "lenet5")
      run_lenet5(s, ranks);
    else if (s.program == "round_trip")
      run_round_trip(s, ranks);
    else if (s.program == "unet3d")
      run_unet3d(s, ranks);
    else if (s.program == "attention")
      run_attention(s, ranks);
    else
      run_data_parallel(s, ranks);
    return 0;
  });
}
