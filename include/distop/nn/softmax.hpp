#pragma once
// Softmax over the last axis on the tape (log_softmax is in nn/log_softmax.hpp).

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = exp(x) / sum_j exp(x_j) over the last axis, computed stably (kernels/softmax.hpp: the row
// maximum subtracted, the row statistics in double), on every rank's box of x [..., classes]; the
// last axis must be unsplit (each row on one rank), the others may be split any way. y lives in
// x's space. Local (no messages). Recorded when x requires a gradient: dx = y (dy - (the row sum
// of dy y)). An x whose last axis is split is an Error.
template <class T>
Var<T> softmax(Tape& tape, const Var<T>& x);

// Attention's masked softmax: softmax(x + mask) over the last axis, with an additive mask (0 where
// an entry is attended to, -inf or a large negative value where it is not, as torch's float
// attn_mask), broadcast against x by nn/arithmetic.hpp's rules: a [S, S2] mask held whole on every
// rank beside scores [B, H, S, S2], say, or a mask aligned with x on its partition. The mask is a
// constant (no gradient); x's gradient is softmax's. A row masked out entirely gives NaN, as in
// torch.
template <class T>
Var<T> softmax(Tape& tape, const Var<T>& x, const DistTensor<T>& mask);

// The causal softmax of scores x [..., S, S2]: entry j of row i (global indices of the last two
// axes) is masked out (-inf) where j > i, torch's is_causal=True (attn_mask = ones(S, S2).tril()),
// then softmax over the last axis. The last axis must be unsplit; the second-to-last may be split
// (each rank masks its rows by their global index). Local; dx as softmax's, zero where masked.
template <class T>
Var<T> causal_softmax(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
