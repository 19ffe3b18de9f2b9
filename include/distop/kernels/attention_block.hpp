#pragma once
// The block kernels of attention computed one key block at a time (ring attention, FlashAttention's
// recurrence): an online softmax that folds a block of scores into running row statistics and an
// output accumulator, and the block form of its backward pass given the rows' log-sum-exp.

#include <cstdint>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

// Where a block of scores [m, n] sits: row i is the query at position q_pos + i and tensor index
// q_index + i along the sequence, column j the key at position k_pos + j and index k_index + j.
//   causal:  entry (i, j) is masked out where k_pos + j > q_pos + i.
//   dropout: p > 0 drops the weight of entry (i, j) as kernels::dropout drops global index
//            g = key_base + (q_index + i) * key_stride + k_index + j (random::uniform(seed, g) <
//            p), scaling the kept ones by 1 / (1 - p); key_base = (n H + h) S^2 and key_stride = S
//            for weights [N, H, S, S], so that the masks are dropout's on the whole weight tensor.
struct AttentionBlock {
  std::int64_t q_pos = 0, k_pos = 0;
  std::int64_t q_index = 0, k_index = 0;
  bool causal = false;
  double dropout = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t key_base = 0;
  std::int64_t key_stride = 0;
};

// The online softmax step for scores s [m, n] (already scaled): with running row maxima `row_max`
// [m] and sums `row_sum` [m] (double; -inf and 0 before the first block), for each row
//   new_max = max(row_max, max over unmasked j of s_ij),  a = exp(row_max - new_max)
//   row_sum = a row_sum + sum_j exp(s_ij - new_max),      out_row = a out_row   (out [m, d])
//   s_ij   <- exp(s_ij - new_max) times the dropout factor (0 where masked)
// after which the caller adds s v_block to out (a GEMM). A row with every entry masked so far
// keeps -inf and 0 and leaves out untouched.
template <class T>
void online_softmax_block(Tensor<T>& s, Tensor<double>& row_max, Tensor<double>& row_sum,
                          Tensor<T>& out, const AttentionBlock& block);

// The end of the forward recurrence: out_row /= row_sum and lse = row_max + log(row_sum) (the log
// of the row's softmax denominator, what the backward pass recomputes the weights from).
template <class T>
void online_softmax_finish(Tensor<T>& out, const Tensor<double>& row_max,
                           const Tensor<double>& row_sum, Tensor<double>& lse);

// delta_i = sum_d dout_id out_id, rows [m, d] (the softmax backward's row term).
template <class T>
void attention_row_dot(const Tensor<T>& dout, const Tensor<T>& out, Tensor<double>& delta);

// The backward step for one block, entry by entry, with p_ij = exp(s_ij - lse_i) (0 where masked)
// and z_ij the dropout factor:
//   s_ij  <- p_ij z_ij                                (the weights that multiplied v: dv += s^T
//   dout) dp_ij <- scale p_ij (z_ij dp_ij - delta_i)        (dp in: dout v^T; out: dscores times
//   scale,
//                                                      so that dq += dp k and dk += dp^T q)
// s and dp are [m, n]; lse and delta [m].
template <class T>
void attention_block_backward(Tensor<T>& s, Tensor<T>& dp, const Tensor<double>& lse,
                              const Tensor<double>& delta, double scale,
                              const AttentionBlock& block);

}  // namespace distop::kernels
