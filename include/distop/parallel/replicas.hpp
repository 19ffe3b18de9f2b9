#pragma once
// Replicas: P ranks laid out as R replicas of a model partitioned over P / R ranks.

#include <mpi.h>

#include "distop/dist/partition.hpp"

namespace distop::parallel {

// Replica r holds the ranks [r P/R, (r + 1) P/R) of `world`, in order: its model's partitions are
// built on model_comm() (Partition(replicas.model_comm(), grid)), so each replica lays out the same
// model over its own ranks. The ranks that sit at the same place in every replica hold the same
// shard of every parameter; they form reduction_comm(), over which data parallelism averages the
// gradients. R = 1 is pure model parallelism; R = P pure data parallelism.
//
// Owns its two communicators (split from `world`, freed on destruction); move-only.
class Replicas {
 public:
  // Collective over `world`. Throws distop::Error (op "Replicas") on every rank unless
  // replicas >= 1 divides the rank count, and unless every rank passed the same count.
  Replicas(MPI_Comm world, int replicas);
  Replicas(Replicas&& other) noexcept;
  Replicas& operator=(Replicas&& other) noexcept;
  Replicas(const Replicas&) = delete;
  Replicas& operator=(const Replicas&) = delete;
  ~Replicas();

  int count() const noexcept { return count_; }
  // This rank's replica, in [0, count()).
  int index() const noexcept { return index_; }
  // The ranks of one replica: P / R.
  int model_ranks() const noexcept { return model_ranks_; }
  // This replica's ranks, ordered as in world (rank i of the replica is world rank
  // index() * model_ranks() + i).
  MPI_Comm model_comm() const noexcept { return model_comm_; }
  // The ranks at this rank's place in every replica, ordered by replica.
  MPI_Comm reduction_comm() const noexcept { return reduction_comm_; }
  MPI_Comm world() const noexcept { return world_; }
  // The number of replicas that hold a rank of partition `p` (whose parent communicator's ranks
  // must be ranks of world()): 1 for a partition within one replica, count() for one over the
  // whole of world(). Local: every rank computes it from the partition's ranks.
  int spanned(const Partition& p) const;

 private:
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm model_comm_ = MPI_COMM_NULL;
  MPI_Comm reduction_comm_ = MPI_COMM_NULL;
  int count_ = 1;
  int index_ = 0;
  int model_ranks_ = 1;
};

}  // namespace distop::parallel
