#pragma once
// Matrix products of 2-D Vars (and batches of them) on the tape, on every rank's boxes through
// kernels::gemm (BLAS on the host, cuBLAS for device memory): C = A B, A B^T and A^T B.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// C = op(A) op(B) with op(A) [m, k] and op(B) [k, n]: matmul is A B (A [m, k], B [k, n]),
// matmul_nt is A B^T (B [n, k]) and matmul_tn is A^T B (A [k, m]). Local (no messages): each rank
// multiplies its own boxes. Gradients (recorded when A or B requires one):
//   matmul     dA = dC B^T   dB = A^T dC
//   matmul_nt  dA = dC B     dB = dC^T A
//   matmul_tn  dA = B dC^T   dB = A dC
//
// Batched: A and B of one rank r > 2, [..., m, k] and [..., k, n] (torch.matmul of equal batch
// shapes, no broadcasting), multiply matrix by matrix over their leading (batch) axes, which must
// have equal extents and be split alike (the same blocks over the same grid axes): each rank
// multiplies the matrices of its own batch box (attention's [B, H, S, D] x [B, H, D, S2], and
// q k^T as matmul_nt). C is [..., m, n], its batch axes split as A's. The transposes and the
// gradients act on the last two axes, matrix by matrix.
//
// Without an output space: A and B live on one partition, the contracted axis (k) is unsplit in
// both, and C [m, n] takes its rows' split from op(A)'s rows and its columns' split from op(B)'s
// columns, which must not be split by the same grid axis. Then each rank's product is its block of
// C exactly: a batch-split A against a replicated weight B gives C split by batch, say. Anything
// else is an Error naming both spaces (alike on every rank).
template <class T>
Var<T> matmul(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> matmul_nt(Tape& tape, const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> matmul_tn(Tape& tape, const Var<T>& a, const Var<T>& b);

// With an output space: C lives in `out_space`, which the caller built so that on every rank the
// boxes fit (op(A)'s box [m, k], op(B)'s box [k, n], C's box [m, n]), whatever the partitions; the
// contracted axis may be split, each rank then holding a partial product for a SumReduce to add up,
// as DistributedLinear does. The fit is checked on each rank's own boxes (an Error there alone).
template <class T>
Var<T> matmul(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space);
template <class T>
Var<T> matmul_nt(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space);
template <class T>
Var<T> matmul_tn(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space);

}  // namespace distop::nn
