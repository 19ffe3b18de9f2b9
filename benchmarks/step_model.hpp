#pragma once
// The pure parts of bench_step_model (benchmarks/step_model.cpp): a two-level fat tree as the cost
// model's machine for a group of ranks, the data-parallel reduction of DataParallel's buckets over
// R replicas on it, and the step's projection (weak and strong scaling). No MPI calls.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "distop/ops/cost_model.hpp"

namespace distop::bench {

// A two-level fat tree (leaf switches of hosts_per_leaf hosts, one rank per host, under spine
// switches): a message within a leaf crosses 2 links (leaf_latency), one across the spines 4
// (spine_latency). Every link moves `bandwidth` bytes/s per direction; a leaf's uplinks carry
// 1 / oversubscription of its hosts' bandwidth (1: full bisection). gamma and copy are the hosts'
// local reduction and copy rates (s / byte). Defaults: platforms/ib-fat-tree-1024.xml (32 x 32
// hosts, 25 GB/s, 0.25 us per link, full bisection) and bench_simulated's gamma and copy.
struct FatTree {
  int hosts_per_leaf = 32;
  double leaf_latency = 0.5e-6;   // s
  double spine_latency = 1.0e-6;  // s
  double bandwidth = 25e9;        // bytes / s
  double oversubscription = 1.0;  // >= 1
  double gamma = 1.0 / 10e9;      // s / byte
  double copy = 1.0 / 20e9;       // s / byte
};

// The machine a collective over `ranks` ranks spread over `span` consecutive hosts sees: within
// one leaf (span <= hosts_per_leaf) the leaf's latency and the link's bandwidth; across leaves the
// spines' latency and the bandwidth an uplink leaves each host, bandwidth / oversubscription (the
// algorithms' rounds each move messages across the spines once the group spans leaves, so every
// round is charged the slower path).
inline cost::Machine fat_tree_machine(const FatTree& t, int span) {
  const bool within_leaf = span <= t.hosts_per_leaf;
  const double beta = (within_leaf ? 1.0 : std::max(1.0, t.oversubscription)) / t.bandwidth;
  return {within_leaf ? t.leaf_latency : t.spine_latency, beta, t.gamma, t.copy};
}

// One bucket of `bytes` reduced over r replicas as parallel::DataParallel does: reduce-scatter
// as an all-to-all of its r chunks (MPI_Ialltoallv, every pair posted at once), the r - 1 received
// chunks summed into the own one, then the sums all-gathered (MPI_Iallgatherv). Seconds.
inline double bucket_seconds(std::int64_t bytes, int r, const cost::Machine& m) {
  if (r <= 1) return 0.0;
  const std::int64_t chunk = bytes / r;
  return cost::alltoallv(chunk * (r - 1), chunk * (r - 1), r - 1, m).seconds +
         m.gamma * static_cast<double>(chunk * (r - 1)) + cost::allgather(bytes, r, m).seconds;
}

// The reduction of the buckets (in the order they become ready) over r replicas: `exposed`, the
// last bucket's (the one overlap cannot hide: it is ready when backward ends), and `all`, every
// bucket's one after the other (no overlap).
struct Reduction {
  double exposed = 0;
  double all = 0;
};
inline Reduction reduction_seconds(const std::vector<std::int64_t>& buckets, int r,
                                   const cost::Machine& m) {
  Reduction out;
  for (const auto b : buckets) out.all += bucket_seconds(b, r, m);
  if (!buckets.empty()) out.exposed = bucket_seconds(buckets.back(), r, m);
  return out;
}

// One configuration of a projection: r replicas of `model_ranks` ranks each, `batch` examples per
// replica; the step is compute + comm (the model-parallel operators inside a replica) + reduction.
struct StepTerms {
  int replicas = 1;
  std::int64_t batch = 0;
  double compute = 0;    // s
  double comm = 0;       // s
  double reduction = 0;  // s
  double step() const { return compute + comm + reduction; }
};

// Efficiency against the smallest configuration `base`: weak scaling (the batch per replica fixed)
// base.step / step; strong scaling (the global batch fixed) base.step base.replicas / (step r).
inline double weak_efficiency(const StepTerms& base, const StepTerms& s) {
  return base.step() / s.step();
}
inline double strong_efficiency(const StepTerms& base, const StepTerms& s) {
  return base.step() * base.replicas / (s.step() * s.replicas);
}

// The term that costs the most against perfect scaling from `base`: each term's excess over its
// ideal share (weak: base's term; strong: base's term base.replicas / replicas). "compute",
// "model-parallel comm" or "reduction".
inline std::string limiting_term(const StepTerms& base, const StepTerms& s, bool strong) {
  const double share = strong ? static_cast<double>(base.replicas) / s.replicas : 1.0;
  const double excess[3] = {s.compute - base.compute * share, s.comm - base.comm * share,
                            s.reduction - base.reduction * share};
  const char* names[3] = {"compute", "model-parallel comm", "reduction"};
  int k = 0;
  for (int i = 1; i < 3; ++i)
    if (excess[i] > excess[k]) k = i;
  return names[k];
}

// The halo exchange of a 3x3x3 convolution with padding 1 (one voxel deep) on [n, c, e0, e1, e2]
// blocks of 4-byte entries split over a g0 x g1 x g2 grid, on a rank interior along every split
// axis (the most neighbours: 2 along an axis of 3 or more parts, 1 along one of 2, none along one
// of 1). HaloExchange sweeps the axes one after another (ops/halo_exchange.hpp): sweep a sends and
// receives one message per neighbour of width * n c * prod_{b<a} (e_b + 2) * prod_{b>a} e_b
// entries (the axes before a already padded, so edges and corners travel through the intermediate
// ranks). One CommStats per sweep of a split axis, in sweep order; the adjoint moves the same
// messages the other way.
inline std::vector<CommStats> unet_halo_sweeps(const std::array<std::int64_t, 3>& block,
                                               const std::array<std::int64_t, 3>& grid,
                                               std::int64_t n, std::int64_t c) {
  std::vector<CommStats> sweeps;
  for (int a = 0; a < 3; ++a) {
    const auto g = grid[static_cast<std::size_t>(a)];
    if (g <= 1) continue;
    const std::int64_t neighbours = g == 2 ? 1 : 2;
    std::int64_t entries = n * c;
    for (int b = 0; b < 3; ++b)
      if (b != a) entries *= block[static_cast<std::size_t>(b)] + (b < a ? 2 : 0);
    const std::int64_t bytes = entries * 4;
    sweeps.push_back({neighbours, neighbours * bytes, neighbours, neighbours * bytes});
  }
  return sweeps;
}

// The halo exchange's time, forward plus adjoint, from its sweeps: each sweep a point-to-point
// plan (packing what it sends, unpacking what it receives, the adjoint also summing it), the
// sweeps one after another, and the padded array of `padded_bytes` copied once each way.
inline double halo_sweeps_seconds(const std::vector<CommStats>& sweeps, std::int64_t padded_bytes,
                                  const cost::Machine& m) {
  double t = 0;
  bool first = true;
  for (const CommStats& s : sweeps) {
    const std::int64_t copied = first ? padded_bytes : 0;
    t +=
        cost::point_to_point_plan(s, {s.bytes_sent, copied, s.bytes_received, 0}, m) +
        cost::point_to_point_plan(s, {s.bytes_sent, copied, s.bytes_received, s.bytes_received}, m);
    first = false;
  }
  return t;
}

}  // namespace distop::bench
