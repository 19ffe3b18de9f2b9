#pragma once
// Contrastive losses over a batch sharded across ranks: SimCLR's NT-Xent, CLIP's InfoNCE and
// SigLIP's pairwise sigmoid loss, each computed by one of four communication strategies that all
// give the loss and the gradients of the global batch (docs/contrastive.md).

#include <mpi.h>

#include <span>
#include <string>
#include <string_view>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::loss {

// How the ranks of the batch communicator share the work of a contrastive loss. With P ranks, B
// global rows of dimension D and b = this rank's rows (rows of both embedding sets):
//   allgather_nograd: every rank gathers all B rows (no gradient through the gather), computes the
//     whole B x B loss and back-propagates into its own rows only. Memory O(B*D + B^2) per rank.
//   gather: the rows are gathered on `root`, which computes the loss and its gradient alone; the
//     adjoint of the gather, a scatter, sends each rank its rows' gradient. Memory on the root
//     O(B*D + B^2), elsewhere O(b*D). The root may hold no rows.
//   allgather: every rank gathers all B rows (AllGather), computes the loss terms of its own b
//     rows (and, for CLIP, its own columns) against all B, and the adjoint of the gather, a
//     reduce-scatter, returns each gathered row's gradient to its owner. Memory O(B*D + b*B).
//   ring: the other ranks' row blocks travel around a ring of send/recv steps, one block at a
//     time; the log-sum-exp is accumulated online, and the backward pass runs the ring again in
//     reverse, recomputing each block's similarities and sending each block's gradient home.
//     Memory O(b_max*D) per rank plus one tile of 256 x 1024 logits; no rank ever holds all B
//     rows or a b x B block.
enum class ContrastiveStrategy { allgather_nograd, gather, allgather, ring };

// "allgather-nograd", "gather", "allgather", "ring" (the names the programs' --strategy takes).
std::string_view strategy_name(ContrastiveStrategy strategy);
// All the names above, in enum order.
std::span<const std::string_view> strategy_names();
// The strategy of a name above; an Error listing the valid names otherwise.
ContrastiveStrategy parse_strategy(std::string_view name);

struct ContrastiveOptions {
  ContrastiveStrategy strategy = ContrastiveStrategy::allgather;
  // The rank of batch_comm that computes the loss under the gather strategy.
  int root = 0;
  // L2-normalise each row of a and b first (y = x / max(||x||, 1e-12), nn::normalize), as the
  // three losses are defined. false when the caller has normalised them already.
  bool normalize = true;
};

// The common contract of the three losses below.
//
// Inputs: `a` and `b` are this rank's rows of the two embedding sets (two views of the same
// images for NT-Xent; image and text embeddings for CLIP and SigLIP), each a Var whose local
// tensor is [b_p, D], with the same b_p for a and b, the same D on every rank, and any b_p >= 0
// (unbalanced blocks; a rank may hold no rows). The global batch is the rows of the ranks of
// `batch_comm` stacked in rank order (B = sum of b_p, at least 1). The local tensors live in the
// default memory space (a GPU's in a CUDA build): the arithmetic runs there, as Kokkos kernels and
// kernels::gemm. Row i of a is paired with row i of b.
//
// Result: distop's loss convention (docs/losses.md). A Var of shape [1] replicated over a 1-D
// partition of every rank of batch_comm (built with the movers and cached on batch_comm), each rank
// holding its component; the loss L is the sum of the components (loss::total gives it on every
// rank). A rank's component is the part of L from its own rows (the terms of its query rows), and
// under the gather strategy, where the root computes every term, the root's is L and the others'
// are 0. The loss's partition says which ranks share this one loss (data parallelism reads it).
//
// Gradients: backward with seed s on every rank (backward(tape, loss) seeds 1) adds to each rank's
// a and b the gradient of s L with respect to its own rows, exactly, whatever the strategy. The
// seed must be the same on every rank (as backward(tape, loss) seeds): each rank's backward uses
// its own seed for the terms it computes. The learnable scalars (logit_scale, logit_bias) are
// replicas of one parameter, one copy per rank, which must hold the same value: each rank's copy
// receives 1/P of s dL/d(scalar) (the ranks' partial gradients summed by an AllSumReduce, then
// shared out equally). So on every input, the gradients summed over the ranks are the gradient of
// s L with respect to parameters shared by all ranks: a data-parallel reducer that sums gradients
// over the ranks needs seed 1; one that averages over R = P replicas needs seed P to give dL/dtheta
// (parallel::DataParallel seeds a loss whose partition spans its R replicas so). The seed is read
// on every rank; the ranks' backward calls are collective.
//
// Collective over batch_comm (in forward and backward; every rank calls with the same strategy,
// root and loss arguments). Invalid inputs on any rank (a wrong rank of tensor, b_p differing
// between a and b, D differing between ranks, an empty global batch, a non-positive temperature,
// a root outside batch_comm) raise the same Error on every rank. The rows move through distop's
// operators (AllGather, Gather, Repartition, SendRecv; the scalars' gradients by AllSumReduce:
// docs/contrastive.md), built on the first call with a batch layout
// (rows per rank, D, strategy, root, precision) and cached on batch_comm (a few layouts; freed
// with batch_comm or when Kokkos finalises).

// NT-Xent (SimCLR): the 2B rows z = [a; b] (normalised), s_ij = z_i . z_j / temperature; each row's
// positive is its other view and the row itself is left out of the denominator:
//   L = 1/(2B) sum_i ( log sum_{j != i} exp(s_ij) - s_{i,pos(i)} ).
template <class T>
Var<T> ntxent(Tape& tape, const Var<T>& a, const Var<T>& b, T temperature, MPI_Comm batch_comm,
              const ContrastiveOptions& options = {});

// CLIP's InfoNCE: logits l_ij = scale a_i . b_j with scale = exp(min(logit_scale, log 100)) (the
// log of the scale is the learnable parameter, as open_clip's logit_scale; clamped so that the
// scale is at most 100, and no gradient flows to it while it is clamped, as torch.clamp):
//   L = 1/2 ( 1/B sum_i (log sum_j exp l_ij - l_ii) + 1/B sum_j (log sum_i exp l_ij - l_jj) ).
// logit_scale: one element on every rank (local shape [1] or []).
template <class T>
Var<T> clip_loss(Tape& tape, const Var<T>& a, const Var<T>& b, const Var<T>& logit_scale,
                 MPI_Comm batch_comm, const ContrastiveOptions& options = {});

// SigLIP: logits l_ij = exp(logit_scale) a_i . b_j + logit_bias, labels z_ij = 1 on the diagonal
// and -1 elsewhere, summed over all B^2 pairs and divided by B (open_clip's SigLipLoss):
//   L = -1/B sum_ij log sigmoid(z_ij l_ij).
// The scale is not clamped. logit_scale and logit_bias: one element on every rank each.
template <class T>
Var<T> siglip_loss(Tape& tape, const Var<T>& a, const Var<T>& b, const Var<T>& logit_scale,
                   const Var<T>& logit_bias, MPI_Comm batch_comm,
                   const ContrastiveOptions& options = {});

}  // namespace distop::loss
