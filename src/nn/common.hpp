#pragma once
// Internal to the nn layer: helpers its layers share.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/core/mpi_check.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn::detail {

// Every rank that holds a box of the input (any rank of its partition, or with `boxes_only` only
// those whose box is not empty) must be in the layer's partition `layer`. From metadata alone, so
// that the check holds or fails alike on every rank where the two partitions' parents are
// congruent; where they are not, each rank checks only that it is in `layer` if it holds a box.
inline void check_input_ranks(const TensorSpace& xs, const Partition& layer, bool boxes_only,
                              const char* op) {
  const Partition& p = xs.partition();
  if (p.same_as(layer)) return;
  int same = MPI_IDENT;
  if (p.parent() != layer.parent())
    DISTOP_MPI_CHECK(MPI_Comm_compare(p.parent(), layer.parent(), &same), op);
  if (same != MPI_IDENT && same != MPI_CONGRUENT) {
    // Over parents that number the processes differently (a layer's default partition, this
    // process alone, under an input spread over the world): the ranks cannot be compared, so each
    // rank checks its own box.
    const bool holds = p.active() && (!boxes_only || xs.local_shape().numel() > 0);
    DISTOP_CHECK(!holds || layer.active(), op, "this rank holds a box of the input (", xs.str(),
                 ") but is not in the layer's ", layer.str());
    return;
  }
  std::vector<int> members = layer.ranks();
  std::sort(members.begin(), members.end());
  for (int i = 0; i < p.size(); ++i) {
    const int r = p.ranks()[static_cast<std::size_t>(i)];
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    if (boxes_only && xs.local_shape_at(p.coords_of(i)).numel() == 0) continue;
    DISTOP_CHECK(false, op, "rank ", r, " holds a box of the input (", xs.str(),
                 ") but is not in the layer's ", layer.str());
  }
}

// The space of a parameter of global shape `shape` replicated over every rank of the partition.
inline TensorSpace replicated(const Partition& p, const Shape& shape) {
  return TensorSpace(
      p, Decomposition::balanced(shape, p.shape(),
                                 std::vector<int>(static_cast<std::size_t>(shape.rank()), -1)));
}

}  // namespace distop::nn::detail
