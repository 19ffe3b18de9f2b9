#include "distop/ops/cost_model.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace distop::cost {
namespace {

// ceil(log2 p), 0 for p <= 1.
int ceil_log2(int p) { return p <= 1 ? 0 : std::bit_width(static_cast<unsigned>(p - 1)); }
bool power_of_two(int p) { return p > 0 && std::has_single_bit(static_cast<unsigned>(p)); }
double frac(int p) { return static_cast<double>(p - 1) / p; }  // (p - 1) / p

}  // namespace

std::string to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kPointToPoint:
      return "point_to_point";
    case Algorithm::kBinomial:
      return "binomial";
    case Algorithm::kScatterRecursiveDoubling:
      return "scatter_recursive_doubling";
    case Algorithm::kScatterRing:
      return "scatter_ring";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kRabenseifner:
      return "rabenseifner";
    case Algorithm::kBruck:
      return "bruck";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveHalving:
      return "recursive_halving";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kLocal:
      return "local";
  }
  return "unknown";
}

Estimate point_to_point(std::int64_t bytes, const Machine& m) {
  return {Algorithm::kPointToPoint, m.alpha + static_cast<double>(bytes) * m.beta};
}

Estimate bcast(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t) {
  if (p <= 1) return {};
  const double n = static_cast<double>(bytes);
  const int lg = ceil_log2(p);
  if (bytes < t.bcast_short_msg_size || p < t.bcast_min_procs)
    return {Algorithm::kBinomial, lg * (m.alpha + n * m.beta)};
  if (bytes < t.bcast_long_msg_size && power_of_two(p))
    return {Algorithm::kScatterRecursiveDoubling, 2 * lg * m.alpha + 2 * frac(p) * n * m.beta};
  return {Algorithm::kScatterRing, (lg + p - 1) * m.alpha + 2 * frac(p) * n * m.beta};
}

Estimate reduce(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t) {
  if (p <= 1) return {};
  const double n = static_cast<double>(bytes);
  const int lg = ceil_log2(p);
  if (bytes <= t.reduce_short_msg_size)
    return {Algorithm::kBinomial, lg * (m.alpha + n * m.beta + n * m.gamma)};
  return {Algorithm::kRabenseifner,
          2 * lg * m.alpha + 2 * frac(p) * n * m.beta + frac(p) * n * m.gamma};
}

Estimate allreduce(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t) {
  if (p <= 1) return {};
  const double n = static_cast<double>(bytes);
  const int lg = ceil_log2(p);
  if (bytes <= t.allreduce_short_msg_size)
    return {Algorithm::kRecursiveDoubling, lg * (m.alpha + n * m.beta + n * m.gamma)};
  return {Algorithm::kRabenseifner,
          2 * lg * m.alpha + 2 * frac(p) * n * m.beta + frac(p) * n * m.gamma};
}

Estimate allgather(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t) {
  if (p <= 1) return {};
  const double n = static_cast<double>(bytes);
  const double volume = frac(p) * n * m.beta;
  if (bytes < t.allgather_long_msg_size && power_of_two(p))
    return {Algorithm::kRecursiveDoubling, ceil_log2(p) * m.alpha + volume};
  if (bytes < t.allgather_short_msg_size && !power_of_two(p))
    return {Algorithm::kBruck, ceil_log2(p) * m.alpha + volume};
  return {Algorithm::kRing, (p - 1) * m.alpha + volume};
}

Estimate reduce_scatter(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t) {
  if (p <= 1) return {};
  const double n = static_cast<double>(bytes);
  const double volume = frac(p) * n * (m.beta + m.gamma);
  if (bytes < t.redscat_commutative_long_msg_size)
    return {Algorithm::kRecursiveHalving, ceil_log2(p) * m.alpha + volume};
  return {Algorithm::kPairwise, (p - 1) * m.alpha + volume};
}

Estimate gather(std::int64_t bytes, int p, const Machine& m) {
  if (p <= 1) return {};
  return {Algorithm::kBinomial,
          ceil_log2(p) * m.alpha + frac(p) * static_cast<double>(bytes) * m.beta};
}

Estimate scatter(std::int64_t bytes, int p, const Machine& m) { return gather(bytes, p, m); }

Estimate alltoallv(std::int64_t bytes_out, std::int64_t bytes_in, int peers, const Machine& m) {
  if (peers <= 0) return {};
  return {Algorithm::kPairwise,
          peers * m.alpha + static_cast<double>(std::max(bytes_out, bytes_in)) * m.beta};
}

double point_to_point_plan(const CommStats& stats, const LocalWork& work, const Machine& m) {
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const double pack = d(work.packed) * m.copy;
  const double send = pack + d(stats.messages_sent) * m.alpha + d(stats.bytes_sent) * m.beta;
  const double receive = pack + d(work.copied) * m.copy + d(stats.messages_received) * m.alpha +
                         d(stats.bytes_received) * m.beta + d(work.unpacked) * m.copy +
                         d(work.summed) * m.gamma;
  return std::max(send, receive);
}

double broadcast(Direction d, std::int64_t bytes, int p, const Machine& m) {
  if (p <= 1) return static_cast<double>(bytes) * m.copy;
  if (d == Direction::kForward) {
    if (p == 2) return point_to_point(bytes, m).seconds;
    return bcast(bytes, p, m).seconds;
  }
  if (p == 2) return point_to_point(bytes, m).seconds + static_cast<double>(bytes) * m.gamma;
  return reduce(bytes, p, m).seconds;
}

double sum_reduce(Direction d, std::int64_t bytes, int p, const Machine& m) {
  return broadcast(d == Direction::kForward ? Direction::kAdjoint : Direction::kForward, bytes, p,
                   m);
}

double all_sum_reduce(std::int64_t bytes, int p, const Machine& m, bool in_place) {
  const double copy = in_place ? 0.0 : static_cast<double>(bytes) * m.copy;
  if (p <= 1) return copy;
  return allreduce(bytes, p, m).seconds + copy;
}

}  // namespace distop::cost
