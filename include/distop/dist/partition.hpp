#pragma once
// Partition: a Cartesian grid of ranks.

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"

namespace distop {

// A Cartesian grid of ranks drawn from a parent communicator. The grid's shape has any number of
// axes; its ranks are listed in row-major grid order. Ranks of the parent that are not in the grid
// are inactive: they hold empty tensors and take no part in the partition's own communicator, but
// they still call every collective constructor, because partitions and operators are created
// collectively over the parent. Copies share the same communicators.
//
// Invariants, checked loudly and identically on every rank: every extent >= 1; the grid has as many
// cells as ranks listed; ranks are distinct ranks of the parent; every rank passed the same grid
// and ranks (checked with one allreduce).
class Partition {
 public:
  // Collective over `parent`. `ranks` are parent ranks in row-major grid order; empty means the
  // first grid.numel() ranks of the parent. The parent is duplicated once, so distop's messages
  // never meet the program's.
  Partition(MPI_Comm parent, Shape grid, std::vector<int> ranks = {});
  // Over MPI_COMM_WORLD.
  static Partition world(Shape grid, std::vector<int> ranks = {});
  // This process alone, as a grid of shape [1] (one axis) or `grid` of one cell; not collective.
  static Partition self(Shape grid = {1});

  const Shape& shape() const noexcept;
  int dim() const noexcept { return shape().rank(); }
  int size() const noexcept;
  bool active() const noexcept;
  // This rank's grid coordinates (empty when inactive) and row-major index (-1 when inactive).
  const std::vector<int>& coords() const noexcept;
  int index() const noexcept;
  // The partition's own communicator (MPI_COMM_NULL when inactive); ranks ordered as the grid.
  MPI_Comm comm() const noexcept;
  // The duplicated parent communicator shared by every partition derived from this one.
  MPI_Comm parent() const noexcept;
  int parent_rank() const noexcept;
  int parent_size() const noexcept;
  // Parent ranks in row-major grid order.
  const std::vector<int>& ranks() const noexcept;
  int rank_at(const std::vector<int>& coords) const;
  std::vector<int> coords_of(int index) const;
  // The grid coordinates of a parent rank, or empty if that rank is not in the grid.
  std::vector<int> coords_of_rank(int parent_rank) const;

  // Derived partitions over the same parent; collective over the parent.
  // The ranks whose coordinate on `axis` is `index`, keeping that axis with extent 1.
  Partition slice(int axis, int index) const;
  // The same ranks in the same order under another grid shape of the same size.
  Partition reshape(Shape grid) const;
  // The ranks of this partition followed by those of `other` not already in it, as a 1-D grid.
  Partition unite(const Partition& other) const;

  // The communicator of the ranks sharing this rank's coordinates on every axis not in `axes`,
  // ordered by their coordinates along `axes`. Collective over this partition's ranks the first
  // time it is asked for; cached afterwards. MPI_COMM_NULL when inactive.
  MPI_Comm axes_comm(std::vector<int> axes) const;

  // Same parent ranks in the same order under the same grid shape, with congruent parents (the
  // same processes in the same order: partitions made separately from one communicator are).
  bool same_as(const Partition& other) const noexcept;
  // "Partition[2, 2] of ranks {0, 1, 2, 3}"
  std::string str() const;

  struct Impl;

 private:
  explicit Partition(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Collective over the parent: checks the grid and ranks (and a caller's `problem`, if any) and
  // agrees on them, then creates the communicator.
  static Partition make(std::shared_ptr<void> parent, Shape grid, std::vector<int> ranks,
                        const std::string& problem = {});
  std::shared_ptr<Impl> impl_;
};

}  // namespace distop
