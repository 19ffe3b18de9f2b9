#include "distop/nn/sequence_parallel.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/core/error.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/attention_block.hpp"
#include "distop/kernels/gemm.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/ops/send_recv.hpp"
#include "heads.hpp"
#include "spaces.hpp"

namespace distop::nn {

std::string_view to_string(SequenceParallelStrategy strategy) {
  return strategy == SequenceParallelStrategy::ring ? "ring" : "alltoall";
}

SequenceParallelStrategy parse_sequence_parallel_strategy(std::string_view name) {
  if (name == "ring") return SequenceParallelStrategy::ring;
  if (name == "alltoall") return SequenceParallelStrategy::alltoall;
  throw Error("SequenceParallelStrategy",
              ::distop::detail::concat("unknown strategy '", name, "': expected ring or alltoall"));
}

std::vector<std::int64_t> sequence_blocks(std::int64_t length, int parts, SequenceLayout layout) {
  DISTOP_CHECK(parts >= 1 && length >= 0, "sequence_blocks", "a sequence of ", length,
               " tokens cannot be split in ", parts, " blocks");
  std::vector<std::int64_t> out(static_cast<std::size_t>(parts));
  if (layout == SequenceLayout::contiguous) {
    const auto b = balanced_bounds(length, parts);
    for (int r = 0; r < parts; ++r) out[r] = b[r + 1] - b[r];
  } else {
    const auto c = balanced_bounds(length, 2 * parts);
    for (int r = 0; r < parts; ++r)
      out[r] = (c[r + 1] - c[r]) + (c[2 * parts - r] - c[2 * parts - 1 - r]);
  }
  return out;
}

std::vector<std::int64_t> sequence_positions(std::int64_t length, int parts,
                                             SequenceLayout layout) {
  DISTOP_CHECK(parts >= 1 && length >= 0, "sequence_positions", "a sequence of ", length,
               " tokens cannot be split in ", parts, " blocks");
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(length));
  if (layout == SequenceLayout::contiguous) {
    for (std::int64_t i = 0; i < length; ++i) out.push_back(i);
    return out;
  }
  const auto c = balanced_bounds(length, 2 * parts);
  for (int r = 0; r < parts; ++r) {
    for (std::int64_t i = c[r]; i < c[r + 1]; ++i) out.push_back(i);
    for (std::int64_t i = c[2 * parts - 1 - r]; i < c[2 * parts - r]; ++i) out.push_back(i);
  }
  return out;
}

#ifdef DISTOP_SMPI
namespace detail {
namespace {
RingBlockHook g_ring_block_hook = nullptr;  // per simulated rank (libdistop is privatised)
}  // namespace
void set_ring_block_hook(RingBlockHook hook) noexcept { g_ring_block_hook = hook; }
}  // namespace detail
#endif

namespace {

// A run of a block's tokens with consecutive positions: local rows [local, local + length) of the
// block, at positions [pos, pos + length) and global indices [index, index + length) along S.
struct Segment {
  std::int64_t local = 0, length = 0, pos = 0, index = 0;
};

// The segments of every block of the sequence (one per block for contiguous, two for zigzag).
std::vector<std::vector<Segment>> block_segments(std::int64_t length, int parts,
                                                 SequenceLayout layout) {
  std::vector<std::vector<Segment>> out(static_cast<std::size_t>(parts));
  const auto blocks = sequence_blocks(length, parts, layout);
  std::int64_t index = 0;
  if (layout == SequenceLayout::contiguous) {
    for (int r = 0; r < parts; ++r) {
      if (blocks[r] > 0) out[r].push_back({0, blocks[r], index, index});
      index += blocks[r];
    }
    return out;
  }
  const auto c = balanced_bounds(length, 2 * parts);
  for (int r = 0; r < parts; ++r) {
    const std::int64_t first = c[r + 1] - c[r];
    const std::int64_t second = c[2 * parts - r] - c[2 * parts - 1 - r];
    if (first > 0) out[r].push_back({0, first, c[r], index});
    if (second > 0) out[r].push_back({first, second, c[2 * parts - 1 - r], index + first});
    index += first + second;
  }
  return out;
}

// Whether a causal mask hides every entry of the block of query segment q and key segment k.
bool hidden(const Segment& q, const Segment& k, bool causal) {
  return causal && k.pos > q.pos + q.length - 1;
}

std::vector<std::int64_t> prefix(const std::vector<std::int64_t>& extents) {
  std::vector<std::int64_t> b{0};
  for (std::int64_t e : extents) b.push_back(b.back() + e);
  return b;
}

}  // namespace

template <class T>
struct SequenceParallelAttention<T>::Impl {
  TensorSpace space;
  SequenceParallel sp;
  int parts = 1;  // P, the ranks along the sequence axis
  int coord = 0;  // this rank's coordinate along it
  std::int64_t seq = 0, heads = 0, dim = 0;
  std::vector<std::int64_t> blocks;  // the extents of the P blocks
  std::vector<std::vector<Segment>> segments;

  // ring: links[c] moves a buffer of `capacity` entries from coordinate c to c + 1 (mod P).
  std::int64_t capacity = 0;
  std::vector<std::unique_ptr<SendRecv<T>>> links;

  // alltoall: q's space seen as [N, T, H/T, S, D] (T the blocks of the heads) and the same with
  // the heads of each block split over the sequence axis instead of S; the Repartitions between.
  TensorSpace sequence5, heads5;
  std::shared_ptr<const LinearOperator<T>> to_heads, to_sequence;
  std::optional<DistTensor<T>> causal_mask;  // zigzag's causal mask [S, S] by position

  Impl(const TensorSpace& heads_space, SequenceParallel options);
  static Var<T> ring(const std::shared_ptr<const Impl>& self, Tape& tape, const Var<T>& q,
                     const Var<T>& k, const Var<T>& v, const SequenceAttentionOptions& o);
  Var<T> alltoall(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                  const SequenceAttentionOptions& o) const;
};

template <class T>
SequenceParallelAttention<T>::Impl::Impl(const TensorSpace& heads_space, SequenceParallel options)
    : space(heads_space), sp(options) {
  constexpr const char* op = "SequenceParallelAttention";
  const Partition& p = space.partition();
  const Decomposition& d = space.decomposition();
  DISTOP_CHECK(sp.sequence_axis >= 0 && sp.sequence_axis < p.dim(), op, "sequence_axis ",
               sp.sequence_axis, " is not a grid axis of ", p.str());
  parts = static_cast<int>(p.shape()[sp.sequence_axis]);
  DISTOP_CHECK(space.rank() == 4, op, "expected heads [N, H, S, D], found ", space.str());
  const Shape& g = space.global_shape();
  seq = g[2];
  heads = g[1];
  dim = g[3];
  blocks = sequence_blocks(seq, parts, sp.layout);
  DISTOP_CHECK(!detail::split(space, 3) && (parts == 1 || (d.split_by(2) == sp.sequence_axis &&
                                                           d.bounds(2) == prefix(blocks))),
               op, "expected heads [N, H, S, D] with D whole and S split over grid axis ",
               sp.sequence_axis, " in the ", parts, " blocks ", Shape(blocks).str(), " of the ",
               sp.layout == SequenceLayout::zigzag ? "zigzag" : "contiguous", " layout, found ",
               space.str());
  DISTOP_CHECK(
      parts == 1 || std::all_of(blocks.begin(), blocks.end(), [](std::int64_t b) { return b > 0; }),
      op, "a sequence of ", seq, " tokens leaves a rank of the ", parts,
      " along the sequence axis without one");
  segments = block_segments(seq, parts, sp.layout);
  if (p.active()) coord = p.coords()[static_cast<std::size_t>(sp.sequence_axis)];

  if (sp.strategy == SequenceParallelStrategy::ring) {
    if (parts > 1 && p.active()) {
      const Shape box = space.local_shape();
      const std::int64_t pairs = box[0] * box[1];
      const std::int64_t longest = *std::max_element(blocks.begin(), blocks.end());
      capacity = std::max<std::int64_t>(2 * pairs * longest * dim, 1);
      const MPI_Comm ring = p.axes_comm({sp.sequence_axis});
      for (int c = 0; c < parts; ++c)
        links.push_back(std::make_unique<SendRecv<T>>(ring, Shape{capacity}, c, (c + 1) % parts));
    }
    return;
  }
  // alltoall: the heads axis is one block per rank of the grid axis splitting it (T >= 1 blocks
  // of H/T heads, equal ones), seen as [N, T, H/T, S, D].
  auto ext = detail::block_extents(d);
  const std::int64_t t = static_cast<std::int64_t>(ext[1].size());
  DISTOP_CHECK(
      heads % t == 0 &&
          std::all_of(ext[1].begin(), ext[1].end(), [&](std::int64_t e) { return e == heads / t; }),
      op, "the all-to-all strategy needs the heads split in equal blocks, found ", space.str());
  const std::int64_t per = heads / t;
  DISTOP_CHECK(per >= parts, op, "the all-to-all strategy splits each rank's ", per,
               " heads over the ", parts, " ranks of the sequence axis, so it needs at least ",
               parts, " of them (found ", space.str(), "); the ring strategy has no such limit");
  const auto& map = d.axis_map();
  sequence5 = TensorSpace(
      p, Decomposition::blocks(Shape{g[0], t, per, seq, dim}, d.grid(),
                               {ext[0], std::vector<std::int64_t>(t, 1), {per}, ext[2], {dim}},
                               {map[0], t > 1 ? map[1] : -1, -1, parts > 1 ? map[2] : -1, -1}));
  heads5 = TensorSpace(
      p, Decomposition::blocks(
             Shape{g[0], t, per, seq, dim}, d.grid(),
             {ext[0],
              std::vector<std::int64_t>(t, 1),
              detail::block_extents(Decomposition::balanced(Shape{per}, Shape{parts}, {0}))[0],
              {seq},
              {dim}},
             {map[0], t > 1 ? map[1] : -1, parts > 1 ? sp.sequence_axis : -1, -1, -1}));
  to_heads = std::make_shared<const Repartition<T>>(sequence5, heads5);
  to_sequence = std::make_shared<const Repartition<T>>(heads5, sequence5);
  if (sp.layout == SequenceLayout::zigzag) {
    const auto pos = sequence_positions(seq, parts, sp.layout);
    std::vector<T> m(static_cast<std::size_t>(seq * seq));
    for (std::int64_t i = 0; i < seq; ++i)
      for (std::int64_t j = 0; j < seq; ++j)
        m[static_cast<std::size_t>(i * seq + j)] =
            pos[j] > pos[i] ? -std::numeric_limits<T>::infinity() : T(0);
    const TensorSpace ms(p, Decomposition::balanced(Shape{seq, seq}, p.shape(), {-1, -1}));
    causal_mask = DistTensor<T>(
        ms, p.active() ? Tensor<T>::from_vector(Shape{seq, seq}, m) : Tensor<T>(ms.local_shape()));
  }
}

// ---- ring ----

namespace {

// Rows [pair rows + s.local, + s.length) of a packed [pairs, rows, D] tensor, as a 2-D view.
template <class T>
Tensor<T> rows_of(const Tensor<T>& packed, std::int64_t pair, std::int64_t rows, const Segment& s,
                  std::int64_t dim) {
  return packed.slice((pair * rows + s.local) * dim, Shape{s.length, dim});
}

Tensor<double> stats_of(const Tensor<double>& stats, std::int64_t pair, std::int64_t rows,
                        const Segment& s) {
  return stats.slice(pair * rows + s.local, Shape{s.length});
}

}  // namespace

// One ring attention call's geometry, kept by value by the backward function: this rank's box of
// [N, H, S, D] as `pairs` (n, h) pairs of `rows` queries, and the blocks' packing in the ring's
// buffers: block c travels as [K | V], each [pairs, blocks[c], D].
template <class T>
struct SequenceParallelAttention<T>::RingCall {
  std::shared_ptr<const Impl> plan;
  SequenceAttentionOptions options;
  double scale = 1;
  std::int64_t pairs = 0, rows = 0, n0 = 0, h0 = 0, local_heads = 1;

  std::int64_t block(int c) const { return plan->blocks[static_cast<std::size_t>(c)]; }
  Tensor<T> packed_k(const Tensor<T>& kv, int c) const {
    return kv.slice(0, Shape{pairs * block(c) * plan->dim});
  }
  Tensor<T> packed_v(const Tensor<T>& kv, int c) const {
    const std::int64_t n = pairs * block(c) * plan->dim;
    return kv.slice(n, Shape{n});
  }
  Tensor<T> buffer(const char* label) const {
    return Tensor<T>::uninitialized(
        Shape{plan->parts > 1 ? plan->capacity
                              : std::max<std::int64_t>(1, 2 * pairs * rows * plan->dim)},
        label);
  }
  Tensor<T> scores() const {
    const std::int64_t longest = *std::max_element(plan->blocks.begin(), plan->blocks.end());
    return Tensor<T>::uninitialized(Shape{std::max<std::int64_t>(1, rows * longest)},
                                    "distop::ring_attention::scores");
  }
  // work(pair, query segment, key segment, block) for this rank's queries against block c, for
  // every pair of segments the causal mask leaves (partly) visible.
  template <class Work>
  void for_blocks(int c, Work&& work) const {
#ifdef DISTOP_SMPI
    if (detail::g_ring_block_hook != nullptr)  // the one dispatch point of injected compute
      return detail::g_ring_block_hook(pairs, rows, block(c));
#endif
    const std::int64_t S = plan->seq, H = plan->heads;
    const int r = plan->coord;
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      const auto base = static_cast<std::uint64_t>(
          ((n0 + pair / local_heads) * H + h0 + pair % local_heads) * S * S);
      for (const Segment& qs : plan->segments[static_cast<std::size_t>(r)])
        for (const Segment& ks : plan->segments[static_cast<std::size_t>(c)]) {
          if (hidden(qs, ks, options.is_causal)) continue;
          work(pair, qs, ks,
               kernels::AttentionBlock{.q_pos = qs.pos,
                                       .k_pos = ks.pos,
                                       .q_index = qs.index,
                                       .k_index = ks.index,
                                       .causal = options.is_causal,
                                       .dropout = options.dropout,
                                       .seed = options.dropout_seed,
                                       .key_base = base,
                                       .key_stride = S});
        }
    }
  }

  // The forward ring: y = attention of q against every block, as the online softmax accumulates
  // it; lse the rows' log-sum-exp; returns the block held last (rank r + 1's), where the backward
  // ring starts.
  Tensor<T> forward(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v, Tensor<T>& y,
                    Tensor<double>& lse) const {
    const Impl& p = *plan;
    const int P = p.parts, r = p.coord;
    const std::int64_t D = p.dim;
    Tensor<double> row_max(Shape{pairs * rows});
    Kokkos::deep_copy(row_max.view(), -std::numeric_limits<double>::infinity());
    Tensor<double> row_sum(Shape{pairs * rows});
    Tensor<T> cur = buffer("distop::ring_attention::kv");
    Tensor<T> next = P > 1 ? buffer("distop::ring_attention::kv") : Tensor<T>();
    packed_k(cur, r).copy_from(k.reshaped(Shape{pairs * rows * D}));
    packed_v(cur, r).copy_from(v.reshaped(Shape{pairs * rows * D}));
    Tensor<T> s_all = scores();
    for (int step = 0; step < P; ++step) {
      const int c = (r - step + P) % P;  // the owner of the block held at this step
      comm::Request recv, send;
      if (step + 1 < P) {  // pass the block on (link r) while computing with it
        const SendRecv<T>& in = *p.links[static_cast<std::size_t>((r + P - 1) % P)];
        const SendRecv<T>& out = *p.links[static_cast<std::size_t>(r)];
        DistTensor<T> from_prev = DistTensor<T>::uninitialized(in.domain());  // empty here
        DistTensor<T> into = DistTensor<T>::from_local(in.range(), next);
        recv = in.start_forward(from_prev, into);
        DistTensor<T> to_next = DistTensor<T>::uninitialized(out.range());  // empty here
        send = out.start_forward(DistTensor<T>::from_local(out.domain(), cur), to_next);
      }
      const std::int64_t kr = block(c);
      const Tensor<T> kb = packed_k(cur, c), vb = packed_v(cur, c);
      for_blocks(c, [&](std::int64_t pair, const Segment& qs, const Segment& ks,
                        const kernels::AttentionBlock& b) {
        Tensor<T> s = s_all.slice(0, Shape{qs.length, ks.length});
        kernels::gemm(kernels::Op::N, kernels::Op::T, static_cast<T>(scale),
                      rows_of(q, pair, rows, qs, D), rows_of(kb, pair, kr, ks, D), T(0), s);
        Tensor<T> o = rows_of(y, pair, rows, qs, D);
        Tensor<double> m = stats_of(row_max, pair, rows, qs);
        Tensor<double> l = stats_of(row_sum, pair, rows, qs);
        kernels::online_softmax_block(s, m, l, o, b);
        kernels::gemm(kernels::Op::N, kernels::Op::N, T(1), s, rows_of(vb, pair, kr, ks, D), T(1),
                      o);
      });
      recv.wait();
      send.wait();
      if (step + 1 < P) std::swap(cur, next);
    }
    lse = Tensor<double>::uninitialized(Shape{pairs * rows});
    Tensor<T> y_rows = y.reshaped(Shape{pairs * rows, D});
    kernels::online_softmax_finish(y_rows, row_max, row_sum, lse);
    return cur;
  }

  // The backward ring, the forward's adjoint replayed in reverse: step P - 1 down to 0, the blocks
  // coming back from rank r + 1 (the adjoint of link r) and going on to rank r - 1 (the adjoint of
  // link r - 1), each with the gradient of its keys and values accumulated by the ranks it has
  // visited. Rank r + 1 sends, at each of its steps, the block it holds, then that block's
  // gradient; the receives are posted in that order. A gradient's send is completed one step
  // later, after the next receives are posted, so that no rank waits on a send whose receive its
  // neighbour posts only after waiting itself.
  void backward(const Tensor<T>& q, const Tensor<T>& y, const Tensor<double>& lse,
                const Tensor<T>& ring_end, const Tensor<T>& dy, Tensor<T>& dq, Tensor<T>& dk,
                Tensor<T>& dv) const {
    const Impl& p = *plan;
    const int P = p.parts, r = p.coord;
    const std::int64_t D = p.dim;
    Tensor<double> delta = Tensor<double>::uninitialized(Shape{pairs * rows});
    kernels::attention_row_dot(dy.reshaped(Shape{pairs * rows, D}),
                               y.reshaped(Shape{pairs * rows, D}), delta);
    Tensor<T> s1 = scores(), s2 = scores();
    Tensor<T> kv = ring_end;
    Tensor<T> kv_next = P > 1 ? buffer("distop::ring_attention::kv") : Tensor<T>();
    Tensor<T> acc = buffer("distop::ring_attention::dkv");
    Tensor<T> sending = P > 1 ? buffer("distop::ring_attention::dkv") : Tensor<T>();
    Tensor<T> incoming = P > 1 ? buffer("distop::ring_attention::dkv") : Tensor<T>();
    const SendRecv<T>* ahead = P > 1 ? p.links[static_cast<std::size_t>(r)].get() : nullptr;
    const SendRecv<T>* back =
        P > 1 ? p.links[static_cast<std::size_t>((r + P - 1) % P)].get() : nullptr;
    auto from_ahead = [&](Tensor<T>& into) {
      DistTensor<T> from = DistTensor<T>::uninitialized(ahead->range());  // empty here
      DistTensor<T> x = DistTensor<T>::from_local(ahead->domain(), into);
      return ahead->start_adjoint(from, x);
    };
    auto to_back = [&](const Tensor<T>& from) {
      DistTensor<T> x = DistTensor<T>::uninitialized(back->domain());  // empty here
      return back->start_adjoint(DistTensor<T>::from_local(back->range(), from), x);
    };
    comm::Request pending_send;
    for (int step = P - 1; step >= 0; --step) {
      const int c = (r - step + P) % P;
      comm::Request recv_acc, recv_kv, send_kv;
      if (step + 1 < P) recv_acc = from_ahead(incoming);
      if (step > 0) {
        recv_kv = from_ahead(kv_next);
        send_kv = to_back(kv);
      }
      pending_send.wait();
      const std::int64_t kr = block(c);
      Kokkos::deep_copy(acc.view(), T(0));
      const Tensor<T> kb = packed_k(kv, c), vb = packed_v(kv, c);
      Tensor<T> dkb = packed_k(acc, c), dvb = packed_v(acc, c);
      for_blocks(c, [&](std::int64_t pair, const Segment& qs, const Segment& ks,
                        const kernels::AttentionBlock& b) {
        Tensor<T> w = s1.slice(0, Shape{qs.length, ks.length});
        Tensor<T> dw = s2.slice(0, Shape{qs.length, ks.length});
        const Tensor<T> q_rows = rows_of(q, pair, rows, qs, D);
        const Tensor<T> k_rows = rows_of(kb, pair, kr, ks, D);
        const Tensor<T> dy_rows = rows_of(dy, pair, rows, qs, D);
        kernels::gemm(kernels::Op::N, kernels::Op::T, static_cast<T>(scale), q_rows, k_rows, T(0),
                      w);
        kernels::gemm(kernels::Op::N, kernels::Op::T, T(1), dy_rows, rows_of(vb, pair, kr, ks, D),
                      T(0), dw);
        kernels::attention_block_backward(w, dw, stats_of(lse, pair, rows, qs),
                                          stats_of(delta, pair, rows, qs), scale, b);
        Tensor<T> dv_rows = rows_of(dvb, pair, kr, ks, D);
        kernels::gemm(kernels::Op::T, kernels::Op::N, T(1), w, dy_rows, T(1), dv_rows);
        Tensor<T> dq_rows = rows_of(dq, pair, rows, qs, D);
        kernels::gemm(kernels::Op::N, kernels::Op::N, T(1), dw, k_rows, T(1), dq_rows);
        Tensor<T> dk_rows = rows_of(dkb, pair, kr, ks, D);
        kernels::gemm(kernels::Op::T, kernels::Op::N, T(1), dw, q_rows, T(1), dk_rows);
      });
      recv_acc.wait();
      if (step + 1 < P) {
        Tensor<T> mine = acc.slice(0, Shape{2 * pairs * kr * D});
        kernels::axpy(T(1), incoming.slice(0, Shape{2 * pairs * kr * D}), mine);
      }
      recv_kv.wait();
      send_kv.wait();
      if (step > 0) {
        std::swap(acc, sending);
        pending_send = to_back(sending);
        std::swap(kv, kv_next);
      }
    }
    pending_send.wait();
    dk.copy_from(packed_k(acc, r).reshaped(dk.shape()));
    dv.copy_from(packed_v(acc, r).reshaped(dv.shape()));
  }
};

template <class T>
Var<T> SequenceParallelAttention<T>::Impl::ring(const std::shared_ptr<const Impl>& self, Tape& tape,
                                                const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                                const SequenceAttentionOptions& o) {
  const Shape box = self->space.local_shape();
  const bool active = self->space.partition().active() && box.numel() > 0;
  RingCall call{.plan = self,
                .options = o,
                .scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(self->dim)))};
  if (active) {
    call.pairs = box[0] * box[1];
    call.rows = box[2];
    call.n0 = self->space.local_offset()[0];
    call.h0 = self->space.local_offset()[1];
    call.local_heads = box[1];
  }
  return make_function<T>(
      tape, "ring_attention", {q, k, v},
      [&] {
        DistTensor<T> y(self->space);  // zeros: the output accumulator
        Tensor<double> lse;
        Tensor<T> ring_end;
        if (active)
          ring_end =
              call.forward(q.value().local(), k.value().local(), v.value().local(), y.local(), lse);
        const DistTensor<T> y_saved = y;
        return Computed{std::move(y), [call, active, y_saved, lse, ring_end](
                                          const DistTensor<T>& dy, Gradients<T>& grads) {
                          if (!active) return;
                          const TensorSpace& box_space = call.plan->space;
                          DistTensor<T> dq(box_space);
                          auto dk = DistTensor<T>::uninitialized(box_space);
                          auto dv = DistTensor<T>::uninitialized(box_space);
                          call.backward(grads.input(0).value().local(), y_saved.local(), lse,
                                        ring_end, dy.local(), dq.local(), dk.local(), dv.local());
                          grads.add(0, std::move(dq));
                          grads.add(1, std::move(dk));
                          grads.add(2, std::move(dv));
                        }};
      },
      FunctionOptions{.collective = true});
}

// ---- all-to-all ----

template <class T>
Var<T> SequenceParallelAttention<T>::Impl::alltoall(Tape& tape, const Var<T>& q, const Var<T>& k,
                                                    const Var<T>& v,
                                                    const SequenceAttentionOptions& o) const {
  const double sc = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(dim)));
  auto to_heads_of = [&](const Var<T>& x) {
    return apply(tape, to_heads, detail::view_as(tape, x, sequence5, "sequence_heads_view"));
  };
  const Var<T> qh = to_heads_of(q), kh = to_heads_of(k), vh = to_heads_of(v);
  // The zigzag layout's causal mask is by position: an additive mask over the tensors' order.
  AttentionMask<T> mask;
  if (o.is_causal && causal_mask)
    mask.attn_mask = *causal_mask;
  else
    mask.is_causal = o.is_causal;
  const Var<T> attended = detail::attention(tape, qh, kh, vh, mask, sc, o.dropout, o.dropout_seed);
  const Var<T> y = apply(tape, to_sequence, attended);
  return detail::view_as(tape, y, space, "sequence_heads_view");
}

// ---- the plan ----

template <class T>
SequenceParallelAttention<T>::SequenceParallelAttention(const TensorSpace& heads,
                                                        SequenceParallel sp)
    : impl_(std::make_shared<const Impl>(heads, sp)) {}

template <class T>
SequenceParallelAttention<T>::~SequenceParallelAttention() = default;

template <class T>
const TensorSpace& SequenceParallelAttention<T>::space() const noexcept {
  return impl_->space;
}

template <class T>
const SequenceParallel& SequenceParallelAttention<T>::sequence_parallel() const noexcept {
  return impl_->sp;
}

template <class T>
Var<T> SequenceParallelAttention<T>::forward(Tape& tape, const Var<T>& q, const Var<T>& k,
                                             const Var<T>& v,
                                             const SequenceAttentionOptions& options) const {
  constexpr const char* op = "SequenceParallelAttention";
  const trace::Compute span(op);
  check_space(q.value(), impl_->space, op, "q");
  check_space(k.value(), impl_->space, op, "k");
  check_space(v.value(), impl_->space, op, "v");
  DISTOP_CHECK(options.dropout >= 0 && options.dropout <= 1, op,
               "dropout must lie in [0, 1], found ", options.dropout);
  if (impl_->sp.strategy == SequenceParallelStrategy::ring)
    return Impl::ring(impl_, tape, q, k, v, options);
  return impl_->alltoall(tape, q, k, v, options);
}

template class SequenceParallelAttention<float>;
template class SequenceParallelAttention<double>;

}  // namespace distop::nn
