#pragma once
// Internal to the nn layer: the reshapes and head permutations of local attention on [N, S, E]
// inputs whose batch axis alone may be split (each rank holding whole sequences).

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/multihead_attention.hpp"

namespace distop::nn::detail {

// The checked space of a sequence input [N, S, E]: rank 3, S and E unsplit (an Error naming `op`
// otherwise).
void check_sequences(const TensorSpace& xs, const char* op);

// [N, S, E] -> [N S, E] (the rows of a Linear) and back to `shape` [N, S, E]: the same storage
// under another shape (no copy), the batch blocks scaled by S. dx = dy seen in x's shape.
template <class T>
Var<T> sequence_rows(Tape& tape, const Var<T>& x);
template <class T>
Var<T> rows_to_sequences(Tape& tape, const Var<T>& x, std::int64_t seq);

// [N, S, E] -> rows where S is split over a grid axis (N and E then whole): rows [N S, E] whose
// axis 0 is split over that grid axis, rank r holding its box's N s_r rows in its storage's order
// (the block-major order: not the global order n S + s, which no box of rows could hold). Row-wise
// operations (linear layers, norms, the head split) do not depend on the order; rows_to_sequences
// with the sequences' space undoes it. sequence_rows above takes this form for such an input.
// rows [N S, F] -> [N, S, F] with the batch and sequence blocks of `sequences` ([N, S, *]), either
// form.
template <class T>
Var<T> rows_to_sequences(Tape& tape, const Var<T>& x, const TensorSpace& sequences);

// y = x's storage seen in space ys (every rank's box of ys holding as many entries as its box of
// x), on the tape: dx = dy seen in x's space.
template <class T>
Var<T> view_as(Tape& tape, const Var<T>& x, TensorSpace ys, const char* op);

// Rows [N S, P H D] (P packed projections, each H heads of D) -> P tensors [N, H, S, D]: output p
// holds entry (n, h, s, d) = x[n S + s, (p H + h) D + d]. dx scatters the outputs' gradients back
// (zero for an output that received none).
template <class T>
std::vector<Var<T>> split_heads(Tape& tape, const Var<T>& x, std::int64_t seq, std::int64_t parts,
                                std::int64_t heads);
// [N, H, S, D] -> rows [N S, H D], the inverse permutation of one part of split_heads.
template <class T>
Var<T> merge_heads(Tape& tape, const Var<T>& x);

// The same permutations of each rank's own heads, into and out of given spaces (tensor
// parallelism, where the heads and the rows' feature axis are split over a grid axis): rows whose
// box is [n S, P h D] (P packed projections of this rank's h heads) -> P tensors in `heads`
// [N, H, S, D] whose box is [n, h, S, D]; and heads [N, H, S, D] with box [n, h, S, D] -> rows in
// `rows` [N S, H D] with box [n S, h D]. Local: entry (n, h, s, d) of a box is entry
// [n S + s, (p h + h) D + d] of the rows' box, whatever the global spaces. Boxes that do not fit
// are an Error on the rank where they do not.
template <class T>
std::vector<Var<T>> split_heads_to(Tape& tape, const Var<T>& x, std::int64_t parts,
                                   const TensorSpace& heads);
template <class T>
Var<T> merge_heads_to(Tape& tape, const Var<T>& x, const TensorSpace& rows);

// Local attention on heads [..., S, D] (any batch axes, split alike; S and D whole):
// softmax(q k^T scale + mask) v, the mask as MultiheadAttention's (attn_mask added, then the causal
// mask applied), dropout p on the weights with masks drawn from `dropout_seed` (none when p is 0).
template <class T>
Var<T> attention(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                 const AttentionMask<T>& mask, double scale, double dropout_p,
                 std::uint64_t dropout_seed);

}  // namespace distop::nn::detail
