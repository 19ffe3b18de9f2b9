#pragma once
// Injected compute for bench_simulated --program attention --compute injected: sequence-parallel
// attention (nn::SequenceParallelAttention) whose every message is real while its local compute is
// charged as simulated compute where it happens.
//
// - Ring: the SMPI build's ring-block hook (nn::detail::set_ring_block_hook, SMPI builds only)
//   stands in for each block's computation, forward and backward, at the point where the ring
//   computes it: after the next block's (and, backward, its gradient's) transfer is posted and
//   before the waits, so that SMPI simulates the overlap of transfer and compute. Each block is
//   charged one block's time measured on one rank (RingProfile), the same on every rank.
// - All-to-all: its local attention is tape operations between the repartitions, so the
//   per-operation injection of op_compute.hpp charges each of them (profile measured on a one-rank
//   model of one rank's share: H/P heads over the whole sequence), its kernels still running on
//   the host uncharged.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <distop/distop.hpp>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "injected_compute.hpp"

namespace distop::bench {

// One rank's block of the ring, in thread CPU time (what SMPI charges): the forward's and the
// backward's per-block compute and their once-per-call rest (the forward's packing of [K | V] and
// final normalisation, the backward's row dot and copies), measured on a one-rank ring (which
// computes exactly one block) with and without the blocks (a hook that does nothing).
struct RingProfile {
  double forward_block = 0, backward_block = 0, forward_once = 0, backward_once = 0;

  double forward_total() const { return forward_block + forward_once; }
  double backward_total() const { return backward_block + backward_once; }

  void save(const std::string& path) const {
    std::ofstream out(path);
    out.precision(17);
    out << "distop ring profile 1\n"
        << forward_block << ' ' << backward_block << ' ' << forward_once << ' ' << backward_once
        << '\n';
    if (!out.flush()) throw Error("bench_simulated", "cannot write the ring profile " + path);
  }
  static RingProfile load(const std::string& path) {
    std::ifstream in(path);
    std::string header;
    RingProfile p;
    if (!std::getline(in, header) || header != "distop ring profile 1" ||
        !(in >> p.forward_block >> p.backward_block >> p.forward_once >> p.backward_once))
      throw Error("bench_simulated", path + " is not a ring profile");
    return p;
  }
  static RingProfile broadcast(const RingProfile& p, int root, MPI_Comm comm) {
    double v[4] = {p.forward_block, p.backward_block, p.forward_once, p.backward_once};
    MPI_Bcast(v, 4, MPI_DOUBLE, root, comm);
    return {v[0], v[1], v[2], v[3]};
  }
};

// The attention benchmark's shape: batch 1, `heads` heads of `dim`, `block` tokens per rank.
struct AttentionShape {
  std::int64_t block = 256, heads = 16, dim = 64;
};

// [1, H, S, D] with S split in equal blocks over the ranks of `partition` (1-D).
inline TensorSpace attention_space(const Partition& partition, const AttentionShape& a,
                                   std::int64_t heads) {
  const std::int64_t p = partition.shape()[0];
  const Shape global{1, heads, a.block * p, a.dim};
  return TensorSpace(partition, Decomposition::blocks(
                                    global, partition.shape(),
                                    {{1}, {heads}, std::vector<std::int64_t>(p, a.block), {a.dim}},
                                    {-1, -1, p > 1 ? 0 : -1, -1}));
}

inline DistTensor<float> attention_input(const TensorSpace& space, std::uint64_t seed) {
  DistTensor<float> x(space);
  std::vector<float> v(static_cast<std::size_t>(space.local_shape().numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(2 * random::uniform(seed, i) - 1);
  if (!v.empty()) x.local().copy_from(Tensor<float>::from_vector(space.local_shape(), v));
  return x;
}

class RingInjection;
namespace {
// One per simulated rank (internal linkage: each privatised copy of the program has its own).
RingInjection& ring_injection_state();
}  // namespace

// The ring-block hook's state: which pass is running, the profile it charges, the blocks charged.
class RingInjection {
 public:
  static RingInjection& instance() { return ring_injection_state(); }

  // Charges `profile` (times divided by `speedup`) for the blocks of the calls that follow, on
  // blocks of `pairs` (n, h) pairs of `block` x `block` (a block of other extents in proportion).
  void start(const RingProfile& profile, double speedup, std::int64_t pairs, std::int64_t block) {
    profile_ = profile;
    speedup_ = speedup;
    unit_ = static_cast<double>(pairs * block * block);
#ifdef DISTOP_SMPI
    nn::detail::set_ring_block_hook(&RingInjection::hook);
#else
    throw Error("bench_simulated", "injected compute for attention needs the SMPI build");
#endif
  }
  // The hook off.
  void stop() {
#ifdef DISTOP_SMPI
    nn::detail::set_ring_block_hook(nullptr);
#endif
  }
  // The pass whose blocks come next; its once-per-call time is charged with its first block.
  void pass(bool backward) {
    backward_ = backward;
    first_ = true;
  }
  // Blocks charged since the last call.
  std::int64_t take_blocks() {
    const std::int64_t n = blocks_;
    blocks_ = 0;
    return n;
  }

 private:
  static void hook(std::int64_t pairs, std::int64_t query_rows, std::int64_t key_rows) {
    instance().on_block(pairs, query_rows, key_rows);
  }
  void on_block(std::int64_t pairs, std::int64_t query_rows, std::int64_t key_rows) {
    const double share = static_cast<double>(pairs * query_rows * key_rows) / unit_;
    double t = share * (backward_ ? profile_.backward_block : profile_.forward_block);
    if (first_) t += backward_ ? profile_.backward_once : profile_.forward_once;
    first_ = false;
    ++blocks_;
    inject_compute(t / speedup_);
  }

  RingProfile profile_;
  double speedup_ = 1, unit_ = 1;
  bool backward_ = false, first_ = true;
  std::int64_t blocks_ = 0;
};

namespace {
RingInjection& ring_injection_state() {
  static RingInjection state;
  return state;
}
#ifdef DISTOP_SMPI
void no_ring_block(std::int64_t, std::int64_t, std::int64_t) {}
#endif
}  // namespace

// Measures the ring's block on this rank alone (MPI_COMM_SELF): `warmup` untimed calls, then the
// medians over `steps` of the forward's and the backward's thread CPU time, with the blocks (the
// whole one-rank call) and, in SMPI builds, without them (a hook that does nothing); the block is
// their difference. Other builds cannot skip the blocks and put all of it in the block.
inline RingProfile measure_ring_block(const AttentionShape& a, int warmup, int steps) {
  const TensorSpace space = attention_space(Partition::self(Shape{1}), a, a.heads);
  const nn::SequenceParallelAttention<float> attention(space, {});
  Var<float> q(attention_input(space, 1), true), k(attention_input(space, 2), true),
      v(attention_input(space, 3), true);
  const DistTensor<float> dy = attention_input(space, 4);
  auto medians = [&] {
    std::vector<double> fwd, bwd;
    for (int i = 0; i < warmup + steps; ++i) {
      Tape tape;
      for (auto* x : {&q, &k, &v}) x->zero_grad();
      const double t0 = thread_cpu_seconds();
      Var<float> y = attention.forward(tape, q, k, v);
      const double t1 = thread_cpu_seconds();
      backward(tape, y, dy);
      const double t2 = thread_cpu_seconds();
      if (i < warmup) continue;
      fwd.push_back(t1 - t0);
      bwd.push_back(t2 - t1);
    }
    return std::pair<double, double>{median(fwd), median(bwd)};
  };
  const auto [fwd, bwd] = medians();
  RingProfile p{fwd, bwd, 0, 0};
#ifdef DISTOP_SMPI
  nn::detail::set_ring_block_hook(&no_ring_block);
  const auto [fwd_once, bwd_once] = medians();
  nn::detail::set_ring_block_hook(nullptr);
  p = {std::max(0.0, fwd - fwd_once), std::max(0.0, bwd - bwd_once), fwd_once, bwd_once};
#endif
  return p;
}

}  // namespace distop::bench
