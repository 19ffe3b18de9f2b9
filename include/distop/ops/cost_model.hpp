#pragma once
// An alpha-beta-gamma cost model of MPI collectives and of distop's operators (in ops/, beside
// the operators whose CommStats it reads).
//
// Costs follow Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
// Operations in MPICH" (IJHPCA 2005), for the algorithm MPICH 4.0 picks at a given size and rank
// count under its default CVARs (kMpich40 below; docs/scaling.md lists them and their source):
//   alpha  seconds per message (latency),
//   beta   seconds per byte moved between two ranks,
//   gamma  seconds per byte of a local reduction (c = a + b, per byte of c),
//   copy   seconds per byte of a local copy (memcpy, pack or unpack of one byte).
// Sizes `bytes` are the whole vector's size (for an all-gather: the gathered result on one rank;
// for a broadcast: the broadcast buffer). p >= 1 ranks. All functions are pure (no MPI calls).

#include <cstdint>
#include <string>

#include "distop/ops/linear_operator.hpp"

namespace distop::cost {

struct Machine {
  double alpha = 0;  // s
  double beta = 0;   // s / byte
  double gamma = 0;  // s / byte
  double copy = 0;   // s / byte
};

// MPICH 4.0's default thresholds (bytes; ranks for bcast_min_procs), the CVARs of the same names
// (MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE, ...), and the choices they make in MPICH's
// MPIR_*_intra_auto selection.
struct MpichThresholds {
  std::int64_t allreduce_short_msg_size = 2048;
  std::int64_t reduce_short_msg_size = 2048;
  std::int64_t bcast_short_msg_size = 12288;
  std::int64_t bcast_long_msg_size = 524288;
  int bcast_min_procs = 8;
  std::int64_t allgather_short_msg_size = 81920;
  std::int64_t allgather_long_msg_size = 524288;
  std::int64_t redscat_commutative_long_msg_size = 524288;
};
inline constexpr MpichThresholds kMpich40{};

enum class Algorithm {
  kPointToPoint,
  kBinomial,                  // bcast, reduce, gather, scatter
  kScatterRecursiveDoubling,  // bcast: scatter + recursive-doubling allgather
  kScatterRing,               // bcast: scatter + ring allgather
  kRecursiveDoubling,         // allreduce, allgather
  kRabenseifner,              // allreduce / reduce: reduce-scatter + allgather / gather
  kBruck,                     // allgather, non-power-of-2 p, short
  kRing,                      // allgather
  kRecursiveHalving,          // reduce_scatter, commutative, short
  kPairwise,                  // reduce_scatter long; alltoallv (all pairs posted at once)
  kLocal,                     // p == 1: no messages
};
std::string to_string(Algorithm a);

struct Estimate {
  Algorithm algorithm = Algorithm::kLocal;
  double seconds = 0;
};

// Point-to-point: alpha + bytes beta.
Estimate point_to_point(std::int64_t bytes, const Machine& m);
// MPI_Bcast of `bytes` from one root.
Estimate bcast(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t = kMpich40);
// MPI_Reduce(SUM) of `bytes` to one root.
Estimate reduce(std::int64_t bytes, int p, const Machine& m, const MpichThresholds& t = kMpich40);
// MPI_Allreduce(SUM) of `bytes`.
Estimate allreduce(std::int64_t bytes, int p, const Machine& m,
                   const MpichThresholds& t = kMpich40);
// MPI_Allgather(v) with `bytes` the gathered total (each rank contributes bytes / p).
Estimate allgather(std::int64_t bytes, int p, const Machine& m,
                   const MpichThresholds& t = kMpich40);
// MPI_Reduce_scatter(SUM) of a `bytes` vector (each rank keeps bytes / p).
Estimate reduce_scatter(std::int64_t bytes, int p, const Machine& m,
                        const MpichThresholds& t = kMpich40);
// MPI_Gather(v) / MPI_Scatter(v) of `bytes` in total (binomial tree).
Estimate gather(std::int64_t bytes, int p, const Machine& m);
Estimate scatter(std::int64_t bytes, int p, const Machine& m);
// MPI_Alltoallv where this rank sends `bytes_out` and receives `bytes_in` to / from `peers` other
// ranks: every pair posted at once (MPICH's scattered algorithm), so latency is paid per peer and
// the larger direction's volume once. The same estimate holds for distop's pairwise exchange with
// a window of rounds in flight (comm::ExchangeSchedule::pairwise, the gradient reducer's default
// beyond 33 replicas): the same messages and bytes per rank; the window bounds the concurrent
// flows, a contention this model does not count.
Estimate alltoallv(std::int64_t bytes_out, std::int64_t bytes_in, int peers, const Machine& m);

// distop's operators.
enum class Direction { kForward, kAdjoint };

// The local work of a point-to-point plan on one rank, in bytes: what it packs before sending,
// copies locally (its own block, HaloExchange's copy of the padded array), unpacks after
// receiving, and adds into its output (an adjoint's received copies, read once more and summed).
struct LocalWork {
  std::int64_t packed = 0;
  std::int64_t copied = 0;
  std::int64_t unpacked = 0;
  std::int64_t summed = 0;
};

// A point-to-point plan (Repartition and what derives from it: Gather, Scatter, AllGather,
// ReduceScatter; HaloExchange; SendRecv) on one rank, from the messages and bytes it moves there
// (LinearOperator::forward_stats / adjoint_stats) and its local work. All messages are posted at
// once after packing; a large message is moved by its receiver (MPICH's rendezvous: the receiver
// copies the data out of the sender's memory), so a sender's local copies overlap its sends while
// a receiver's follow its receives:
//   send side     packed copy + messages_sent alpha + bytes_sent beta
//   receive side  packed copy + copied copy + messages_received alpha + bytes_received beta
//                 + unpacked copy + summed gamma
//   time          the larger of the two (a rank that neither sends nor receives: its copies).
// The operator's time is the maximum of this over its ranks.
double point_to_point_plan(const CommStats& stats, const LocalWork& work, const Machine& m);

// Broadcast of `bytes` from one rank to p (forward), and its adjoint, the sum-reduce onto it. At
// p = 2 distop sends one message (and, for the sum, adds the received vector locally); beyond, it
// calls MPI_Bcast / MPI_Reduce. SumReduce's forward is Broadcast's adjoint and vice versa.
double broadcast(Direction d, std::int64_t bytes, int p, const Machine& m);
double sum_reduce(Direction d, std::int64_t bytes, int p, const Machine& m);
// AllSumReduce of `bytes` over p ranks (self-adjoint: MPI_Allreduce both ways). Out of place
// (input and output distinct), MPICH first copies the input into the output (MPIR_Localcopy):
// bytes copy more.
double all_sum_reduce(std::int64_t bytes, int p, const Machine& m, bool in_place = false);

}  // namespace distop::cost
