#pragma once
// BroadcastPlan: the communicators behind Broadcast and SumReduce, which run one plan in opposite
// directions.

#include <memory>
#include <vector>

#include "distop/comm/mpi.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// The plan for copying data from a source partition to a destination partition with DistDL's
// broadcast semantics: the source grid's shape is left-padded with 1s to the destination's rank;
// on every axis it must then equal the destination's extent or be 1, and along the axes where it
// is 1 the data is copied to every destination rank. The destination rank at coordinates c
// receives from the source rank at c with each such axis set to 0.
//
// The source and destination may be the same ranks, overlap, be disjoint, or leave ranks of the
// parent idle. Each source rank roots one group: itself plus the destination ranks it feeds. A
// group of more than one rank gets its own communicator, created in increasing group order with
// MPI_Comm_create_group, so the construction is collective over the parent (idle ranks return at
// once) and payload moves run in the same order, which keeps them deadlock-free.
//
// The plan depends on the partitions only; Broadcast and SumReduce operators for tensors of any
// shape can share one plan without further communication.
class BroadcastPlan {
 public:
  // Collective over the parent communicator of both partitions (which must be congruent): every
  // rank must pass the same partitions, or all of them raise the same Error.
  BroadcastPlan(Partition src, Partition dst);
  // The plan from src_space's partition to `dst`, agreed also on src_space (the same on every
  // rank, its boxes within MPI's int count) for the operator `op` built on it: the collective
  // constructors Broadcast(src_space, dst) and SumReduce(dst, src_space).
  static std::shared_ptr<const BroadcastPlan> agreed(const TensorSpace& src_space,
                                                     const Partition& dst, const char* op);

  const Partition& src() const noexcept { return src_; }
  const Partition& dst() const noexcept { return dst_; }
  // The space a tensor of `src_space` (on src()) is broadcast into: the same global shape on
  // dst(), split as the source is along the axes the two grids share, replicated along the axes
  // where the source grid has extent 1. Metadata only.
  TensorSpace broadcast_space(const TensorSpace& src_space) const;

  // Payload moves. `x` is this rank's source box (x_count entries; none when not a source rank),
  // `y` its destination box (y_count entries; none when not a destination rank).
  // broadcast: y = x of this rank's source (overwrites y).
  template <class T>
  void broadcast(const T* x, std::int64_t x_count, T* y, std::int64_t y_count) const;
  // reduce: x = sum of y over the group this rank roots (overwrites x), the adjoint of broadcast.
  template <class T>
  void reduce(const T* y, std::int64_t y_count, T* x, std::int64_t x_count) const;

  // The logical volume on this rank, with the same counts (in bytes per element `element`): a root
  // sends its box once to each other member of its group, each member receives it once;
  // reduce_stats is the reverse.
  CommStats broadcast_stats(std::int64_t x_count, std::int64_t y_count, std::size_t element) const;
  CommStats reduce_stats(std::int64_t y_count, std::int64_t x_count, std::size_t element) const;

 private:
  struct Group {
    int id = -1;          // the source grid index of the group's root
    bool root = false;    // this rank is the group's source
    bool member = false;  // this rank is one of the group's destinations
    comm::Comm comm;      // null when the group is this rank alone
    int size = 1;         // members, root included
  };
  // The source grid index feeding the destination cell at `dst_coords`.
  int source_group(const std::vector<int>& dst_coords) const;

  Partition src_;
  Partition dst_;
  int pad_ = 0;                // destination rank minus source rank
  std::vector<Group> groups_;  // this rank's groups (at most two), in increasing id order
};

}  // namespace distop
