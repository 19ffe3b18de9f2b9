#pragma once
// The operators that move the rows of a sharded contrastive loss (src/loss/contrastive.cpp), in a
// private header so that tests/mpi/contrastive_movers_test.cpp can run their adjoint tests on the
// very spaces the strategies build.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/dist/tensor_space.hpp"
#include "distop/loss/contrastive.hpp"
#include "distop/ops/linear_operator.hpp"
#include "distop/ops/send_recv.hpp"

namespace distop::loss::detail {

// For a batch with rows[c] rows of each embedding set (dimension dim) on rank c of comm:
template <class T>
struct ContrastiveMovers {
  // The [2B, D] payload of the global batch: rank c's rows [a_c; b_c] are block c of axis 0, on a
  // partition of the ranks that hold rows (Decomposition's blocks are non-empty, so a rank without
  // rows is outside it and holds the empty box). Not built for the ring.
  TensorSpace rows;
  // allgather: AllGather(rows, {0}) (its adjoint, ReduceScatter, returns the gathered gradients);
  // gather: Gather(rows, root) (adjoint Scatter); allgather_nograd: AllGather(rows, {0}) when
  // every rank holds rows, else a Repartition of rows onto a copy on every rank of comm (the
  // ranks without rows compute the loss too), whose adjoint the strategy does not use.
  // Null for the ring.
  std::unique_ptr<LinearOperator<T>> gather;
  // ring (P > 1 ranks): links[c] moves a block of [2 max_rows, D] from rank c to rank c + 1
  // (mod P) by its forward, and from c + 1 back to c by its adjoint. A block of fewer rows
  // travels in the first entries (the rest is not read). Empty for the other strategies.
  std::vector<std::unique_ptr<SendRecv<T>>> links;
};

// Collective over comm: every rank passes the same rows (at least one positive), dim >= 1,
// strategy and root.
template <class T>
std::shared_ptr<const ContrastiveMovers<T>> make_contrastive_movers(
    MPI_Comm comm, const std::vector<std::int64_t>& rows, std::int64_t dim,
    ContrastiveStrategy strategy, int root);

}  // namespace distop::loss::detail
