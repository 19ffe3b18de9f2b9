#include "heads.hpp"

#include <Kokkos_Core.hpp>
#include <span>
#include <utility>

#include "common.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "spaces.hpp"

namespace distop::nn::detail {

namespace {

// The batch blocks of axis 0 and its grid axis.
struct BatchSplit {
  std::vector<std::int64_t> extents;
  int grid_axis;
};
BatchSplit batch_split(const TensorSpace& s) {
  return {block_extents(s.decomposition())[0], s.decomposition().axis_map()[0]};
}
std::vector<std::int64_t> scaled(std::vector<std::int64_t> e, std::int64_t f) {
  for (auto& v : e) v *= f;
  return e;
}

// Copies between rows [N S, P H D] (part `part`) and heads [N, H, S, D]: to_heads writes
// heads = rows' part; otherwise rows' part = beta rows' part + heads.
template <class T>
void permute_heads(const Tensor<T>& rows, const Tensor<T>& heads, std::int64_t parts,
                   std::int64_t part, bool to_heads, T beta) {
  const std::int64_t h_count = heads.extent(1), s_count = heads.extent(2),
                     d_count = heads.extent(3);
  const std::int64_t width = parts * h_count * d_count;
  auto rv = rows.view();
  auto hv = heads.view();
  // One work item per head row of D entries (n, h, s): the index arithmetic (integer divisions)
  // once per row, the D entries a contiguous run on both sides.
  Kokkos::parallel_for(
      "distop::permute_heads",
      Kokkos::RangePolicy<ExecSpace>(0, d_count > 0 ? heads.numel() / d_count : 0),
      KOKKOS_LAMBDA(std::int64_t o) {
        const std::int64_t s = o % s_count;
        const std::int64_t h = (o / s_count) % h_count;
        const std::int64_t n = o / (s_count * h_count);
        const std::int64_t i = o * d_count;
        const std::int64_t j = (n * s_count + s) * width + (part * h_count + h) * d_count;
        if (to_heads) {
          for (std::int64_t d = 0; d < d_count; ++d) hv(i + d) = rv(j + d);
        } else if (beta == T(0)) {
          for (std::int64_t d = 0; d < d_count; ++d) rv(j + d) = hv(i + d);
        } else {
          for (std::int64_t d = 0; d < d_count; ++d) rv(j + d) = beta * rv(j + d) + hv(i + d);
        }
      });
}

// The adjoint of splitting rows [N S, P H D] into P head tensors: rows = beta rows + the heads
// dys (a null one: no gradient). Each part writes its own columns: one pass over the rows in all,
// unless a part without a gradient must leave zeros in its columns.
template <class T>
void add_heads_to_rows(Tensor<T>& rows, std::span<const DistTensor<T>* const> dys,
                       std::int64_t parts, T beta) {
  bool all = true;
  for (std::int64_t p = 0; p < parts; ++p) all = all && dys[static_cast<std::size_t>(p)] != nullptr;
  if (!all && beta == T(0)) {
    Kokkos::deep_copy(rows.view(), T(0));
    beta = T(1);
  }
  for (std::int64_t p = 0; p < parts; ++p)
    if (dys[static_cast<std::size_t>(p)] != nullptr)
      permute_heads(rows, dys[static_cast<std::size_t>(p)]->local(), parts, p, false, beta);
}

}  // namespace

template <class T>
Var<T> view_as(Tape& tape, const Var<T>& x, TensorSpace ys, const char* op) {
  return make_function<T>(tape, op, {x}, [&] {
    auto y = DistTensor<T>::uninitialized(ys);
    y.local() = x.value().local().reshaped(ys.local_shape());
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        const Tensor<T> g = dy.local().reshaped(dx.shape());
                        if (beta == T(0))
                          dx.copy_from(g);
                        else
                          kernels::axpy(T(1), g, dx);
                      });
                    }};
  });
}

void check_sequences(const TensorSpace& xs, const char* op) {
  DISTOP_CHECK(xs.rank() == 3 && !split(xs, 1) && !split(xs, 2), op,
               "expected an input [N, S, E] with the sequence and feature axes unsplit, found ",
               xs.str());
}

template <class T>
Var<T> sequence_rows(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  const Shape& g = xs.global_shape();
  if (xs.rank() == 3 && split(xs, 1)) {  // a split sequence: block-major rows
    DISTOP_CHECK(!split(xs, 0) && !split(xs, 2), "sequence_rows",
                 "an input [N, S, E] with its sequence axis split must have N and E whole, found ",
                 xs.str());
    TensorSpace ys(xs.partition(), Decomposition::blocks(
                                       Shape{g[0] * g[1], g[2]}, xs.decomposition().grid(),
                                       {scaled(block_extents(xs.decomposition())[1], g[0]), {g[2]}},
                                       {xs.decomposition().axis_map()[1], -1}));
    return view_as(tape, x, std::move(ys), "sequence_rows");
  }
  check_sequences(xs, "sequence_rows");
  const auto b = batch_split(xs);
  TensorSpace ys(xs.partition(),
                 Decomposition::blocks(Shape{g[0] * g[1], g[2]}, xs.decomposition().grid(),
                                       {scaled(b.extents, g[1]), {g[2]}}, {b.grid_axis, -1}));
  return view_as(tape, x, std::move(ys), "sequence_rows");
}

template <class T>
Var<T> rows_to_sequences(Tape& tape, const Var<T>& x, std::int64_t seq) {
  const TensorSpace& xs = x.space();
  const Shape& g = xs.global_shape();
  DISTOP_CHECK(xs.rank() == 2 && seq > 0 && g[0] % seq == 0 && !split(xs, 1), "rows_to_sequences",
               "expected rows [N ", seq, ", E] with the feature axis unsplit, found ", xs.str());
  auto b = batch_split(xs);
  for (auto& e : b.extents) {
    DISTOP_CHECK(e % seq == 0, "rows_to_sequences", "a block of rows splits a sequence of ", seq,
                 " in ", xs.str());
    e /= seq;
  }
  TensorSpace ys(xs.partition(),
                 Decomposition::blocks(Shape{g[0] / seq, seq, g[1]}, xs.decomposition().grid(),
                                       {b.extents, {seq}, {g[1]}}, {b.grid_axis, -1, -1}));
  return view_as(tape, x, std::move(ys), "rows_to_sequences");
}

template <class T>
Var<T> rows_to_sequences(Tape& tape, const Var<T>& x, const TensorSpace& sequences) {
  const TensorSpace& xs = x.space();
  const Shape& g = sequences.global_shape();
  if (!(sequences.rank() == 3 && split(sequences, 1)))
    return rows_to_sequences(tape, x, g.rank() == 3 ? g[1] : 0);
  DISTOP_CHECK(xs.rank() == 2 && xs.global_shape()[0] == g[0] * g[1] && !split(xs, 1),
               "rows_to_sequences", "expected rows [", g[0] * g[1],
               ", F] with the feature axis unsplit, found ", xs.str());
  const Decomposition& d = sequences.decomposition();
  auto ext = block_extents(d);
  TensorSpace ys(sequences.partition(),
                 Decomposition::blocks(Shape{g[0], g[1], xs.global_shape()[1]}, d.grid(),
                                       {ext[0], ext[1], {xs.global_shape()[1]}},
                                       {d.axis_map()[0], d.axis_map()[1], -1}));
  return view_as(tape, x, std::move(ys), "rows_to_sequences");
}

template <class T>
std::vector<Var<T>> split_heads(Tape& tape, const Var<T>& x, std::int64_t seq, std::int64_t parts,
                                std::int64_t heads) {
  const TensorSpace& xs = x.space();
  const Shape& g = xs.global_shape();
  DISTOP_CHECK(xs.rank() == 2 && !split(xs, 1) && seq > 0 && g[0] % seq == 0 && parts > 0 &&
                   heads > 0 && g[1] % (parts * heads) == 0,
               "split_heads", "expected rows [N ", seq, ", ", parts, " ", heads,
               " D] with the feature axis unsplit, found ", xs.str());
  auto b = batch_split(xs);
  for (auto& e : b.extents) e /= seq;
  const std::int64_t d = g[1] / (parts * heads);
  TensorSpace ys(xs.partition(), Decomposition::blocks(
                                     Shape{g[0] / seq, heads, seq, d}, xs.decomposition().grid(),
                                     {b.extents, {heads}, {seq}, {d}}, {b.grid_axis, -1, -1, -1}));
  return make_function<T>(tape, "split_heads", {x}, [&] {
    std::vector<DistTensor<T>> ys_values;
    for (std::int64_t p = 0; p < parts; ++p) {
      auto y = DistTensor<T>::uninitialized(ys);
      permute_heads(x.value().local(), y.local(), parts, p, true, T(0));
      ys_values.push_back(std::move(y));
    }
    return Computed{std::move(ys_values),
                    [parts](std::span<const DistTensor<T>* const> dys, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        add_heads_to_rows(dx, dys, parts, beta);
                      });
                    }};
  });
}

template <class T>
Var<T> merge_heads(Tape& tape, const Var<T>& x) {
  const TensorSpace& xs = x.space();
  const Shape& g = xs.global_shape();
  DISTOP_CHECK(xs.rank() == 4 && !split(xs, 1) && !split(xs, 2) && !split(xs, 3), "merge_heads",
               "expected heads [N, H, S, D] split by the batch axis alone, found ", xs.str());
  const auto b = batch_split(xs);
  TensorSpace ys(xs.partition(), Decomposition::blocks(
                                     Shape{g[0] * g[2], g[1] * g[3]}, xs.decomposition().grid(),
                                     {scaled(b.extents, g[2]), {g[1] * g[3]}}, {b.grid_axis, -1}));
  return make_function<T>(tape, "merge_heads", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(ys);
    permute_heads(y.local(), x.value().local(), 1, 0, false, T(0));
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        if (beta == T(0)) {
                          permute_heads(dy.local(), dx, 1, 0, true, T(0));
                        } else {
                          Tensor<T> t = Tensor<T>::uninitialized(dx.shape());
                          permute_heads(dy.local(), t, 1, 0, true, T(0));
                          kernels::axpby(T(1), t, beta, dx);
                        }
                      });
                    }};
  });
}

namespace {

// The box of `heads` [n, h, S, D] and the rows' box [n S, P h D] it corresponds to.
void check_head_boxes(const Shape& rows, const Shape& heads, std::int64_t parts, const char* op) {
  DISTOP_CHECK(rows.rank() == 2 && heads.rank() == 4 && parts > 0 &&
                   rows[0] == heads[0] * heads[2] && rows[1] == parts * heads[1] * heads[3],
               op, "this rank's box of rows ", rows.str(), " does not hold ", parts,
               " projections of its box of heads ", heads.str());
}

}  // namespace

template <class T>
std::vector<Var<T>> split_heads_to(Tape& tape, const Var<T>& x, std::int64_t parts,
                                   const TensorSpace& heads) {
  DISTOP_CHECK(heads.rank() == 4, "split_heads_to", "expected heads [N, H, S, D], found ",
               heads.str());
  check_head_boxes(x.value().local().shape(), heads.local_shape(), parts, "split_heads_to");
  return make_function<T>(tape, "split_heads", {x}, [&] {
    std::vector<DistTensor<T>> ys_values;
    for (std::int64_t p = 0; p < parts; ++p) {
      auto y = DistTensor<T>::uninitialized(heads);
      permute_heads(x.value().local(), y.local(), parts, p, true, T(0));
      ys_values.push_back(std::move(y));
    }
    return Computed{std::move(ys_values),
                    [parts](std::span<const DistTensor<T>* const> dys, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        add_heads_to_rows(dx, dys, parts, beta);
                      });
                    }};
  });
}

template <class T>
Var<T> merge_heads_to(Tape& tape, const Var<T>& x, const TensorSpace& rows) {
  DISTOP_CHECK(rows.rank() == 2, "merge_heads_to", "expected rows [N S, H D], found ", rows.str());
  check_head_boxes(rows.local_shape(), x.value().local().shape(), 1, "merge_heads_to");
  return make_function<T>(tape, "merge_heads", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(rows);
    permute_heads(y.local(), x.value().local(), 1, 0, false, T(0));
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        if (beta == T(0)) {
                          permute_heads(dy.local(), dx, 1, 0, true, T(0));
                        } else {
                          Tensor<T> t = Tensor<T>::uninitialized(dx.shape());
                          permute_heads(dy.local(), t, 1, 0, true, T(0));
                          kernels::axpby(T(1), t, beta, dx);
                        }
                      });
                    }};
  });
}

#define DISTOP_INSTANTIATE_TO(T)                                                  \
  template std::vector<Var<T>> split_heads_to(Tape&, const Var<T>&, std::int64_t, \
                                              const TensorSpace&);                \
  template Var<T> merge_heads_to(Tape&, const Var<T>&, const TensorSpace&);
DISTOP_INSTANTIATE_TO(float)
DISTOP_INSTANTIATE_TO(double)
#undef DISTOP_INSTANTIATE_TO

template <class T>
Var<T> attention(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                 const AttentionMask<T>& mask, double scale_by, double dropout_p,
                 std::uint64_t dropout_seed) {
  Var<T> scores = matmul_nt(tape, scale(tape, q, scale_by), k);
  Var<T> weights;
  if (mask.is_causal) {
    if (mask.attn_mask) scores = add(tape, scores, Var<T>(*mask.attn_mask, false));
    weights = causal_softmax(tape, scores);
  } else if (mask.attn_mask) {
    weights = softmax(tape, scores, *mask.attn_mask);
  } else {
    weights = softmax(tape, scores);
  }
  if (dropout_p > 0.0) weights = dropout(tape, weights, dropout_p, dropout_seed, true);
  return matmul(tape, weights, v);
}

#define DISTOP_INSTANTIATE(T)                                                                \
  template Var<T> attention(Tape&, const Var<T>&, const Var<T>&, const Var<T>&,              \
                            const AttentionMask<T>&, double, double, std::uint64_t);         \
  template Var<T> sequence_rows(Tape&, const Var<T>&);                                       \
  template Var<T> rows_to_sequences(Tape&, const Var<T>&, std::int64_t);                     \
  template Var<T> rows_to_sequences(Tape&, const Var<T>&, const TensorSpace&);               \
  template Var<T> view_as(Tape&, const Var<T>&, TensorSpace, const char*);                   \
  template std::vector<Var<T>> split_heads(Tape&, const Var<T>&, std::int64_t, std::int64_t, \
                                           std::int64_t);                                    \
  template Var<T> merge_heads(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn::detail
