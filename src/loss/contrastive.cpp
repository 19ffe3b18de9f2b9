#include "distop/loss/contrastive.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "contrastive_kernels.hpp"
#include "contrastive_movers.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/timers.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/gemm.hpp"
#include "distop/nn/normalize.hpp"
#include "distop/ops/all_gather.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/send_recv.hpp"
#include "scalar.hpp"

namespace distop::loss {

namespace {

constexpr std::array<std::string_view, 4> kStrategyNames = {"allgather-nograd", "gather",
                                                            "allgather", "ring"};

// The ring's similarity blocks are computed in tiles of at most kRowTile query rows by kTile key
// rows (1 MiB of float logits), small enough to stay in cache between the GEMM that writes a tile
// and the passes that read it.
constexpr std::int64_t kTile = 1024;
constexpr std::int64_t kRowTile = 256;

using Kind = detail::ContrastiveKind;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::ntxent:
      return "ntxent";
    case Kind::clip:
      return "clip_loss";
    case Kind::siglip:
      return "siglip_loss";
  }
  return "contrastive loss";
}

// Who holds which rows: rows[c] rows of each embedding set on rank c of batch_comm.
struct Layout {
  int size = 1;
  int rank = 0;
  std::int64_t dim = 0;
  std::int64_t batch = 0;
  std::int64_t max_rows = 0;
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> offset;  // first global row of each rank
};

// A similarity head: query rows [q0, q0 + nq) of a query payload against key rows [k0, k0 + nk)
// of a key payload. A payload is one rank's rows [a; b] stacked (2 n rows of D).
struct Head {
  std::int64_t q0, nq, k0, nk;
  std::int64_t i0 = 0;  // a tile of a head: the index of its first query row within the head
};

// The head itself (stored logits), or its tiles of kRowTile query rows.
std::vector<Head> row_tiles(const Head& h, bool whole) {
  if (whole) return {h};
  std::vector<Head> tiles;
  for (std::int64_t i0 = 0; i0 < h.nq; i0 += kRowTile)
    tiles.push_back(Head{h.q0 + i0, std::min(kRowTile, h.nq - i0), h.k0, h.nk, i0});
  return tiles;
}

// The losses as heads over payloads, with their per-row statistics (online log-sum-exp) and the
// gradients of each block. T is the storage type; sums are accumulated in double.
template <class T>
class Engine {
 public:
  Engine(Kind kind, const Layout& layout, double alpha, double bias, double weight)
      : kind_(kind), layout_(layout), alpha_(alpha), bias_(bias), weight_(weight) {}

  std::vector<Head> heads(std::int64_t bq, std::int64_t bk) const {
    switch (kind_) {
      case Kind::ntxent:
        return {{0, 2 * bq, 0, 2 * bk}};
      case Kind::clip:
        return {{0, bq, bk, bk}, {bq, bq, 0, bk}};
      case Kind::siglip:
        return {{0, bq, bk, bk}};
    }
    return {};
  }
  // Rows of statistics a query payload of bq rows per set needs.
  std::int64_t stat_rows(std::int64_t bq) const { return kind_ == Kind::siglip ? bq : 2 * bq; }
  // Entries of all heads' logits of a (bq, bk) block.
  std::int64_t block_entries(std::int64_t bq, std::int64_t bk) const {
    std::int64_t n = 0;
    for (const Head& h : heads(bq, bk)) n += h.nq * h.nk;
    return n;
  }

  // Per query row: the online log-sum-exp's statistics (in the tensors' memory space); SigLIP:
  // the sum of the pair terms (unweighted).
  struct Stats {
    detail::RowStatViews<MemSpace> rows;
    double loss = 0;
    void reset(std::int64_t n) {
      rows.reset(n);
      loss = 0;
    }
  };

  // The logits of head h restricted to key rows [k0 + j0, k0 + j0 + nj) into s[nq, nj].
  void logits(const Head& h, std::int64_t j0, std::int64_t nj, const Tensor<T>& xq,
              const Tensor<T>& xk, Tensor<T>& s) const {
    const std::int64_t d = layout_.dim;
    const Tensor<T> q = xq.slice(h.q0 * d, Shape{h.nq, d});
    const Tensor<T> k = xk.slice((h.k0 + j0) * d, Shape{nj, d});
    kernels::gemm(kernels::Op::N, kernels::Op::T, static_cast<T>(alpha_), q, k, T(0), s);
    if (kind_ == Kind::siglip) detail::add_bias(s.view(), h.nq * nj, static_cast<T>(bias_));
  }

  // The kernels' view of head tile h at key offset j0 (nj keys) in a block of bq rows per set.
  static detail::Tile tile_of(const Head& h, std::int64_t j0, std::int64_t nj, std::int64_t bq,
                              bool own) {
    detail::Tile t;
    t.nq = h.nq;
    t.nj = nj;
    t.r0 = h.q0;
    t.i0 = h.i0;
    t.j0 = j0;
    t.n = bq;
    t.own = own;
    return t;
  }

  // Folds the block (query payload xq of bq rows per set, key payload xk of bk) into st. `own`:
  // the block is the query payload's own (positives and exclusions lie there). With `store`, the
  // logits are kept there, from entry `at` on (block_entries(bq, bk) entries), else they are
  // computed tile by tile in `scratch` (scratch_entries(bq, bk) entries).
  void forward_block(const Tensor<T>& xq, std::int64_t bq, const Tensor<T>& xk, std::int64_t bk,
                     bool own, Stats& st, Tensor<T>* store, std::int64_t at,
                     Tensor<T>& scratch) const {
    for (const Head& head : heads(bq, bk)) {
      if (head.nq == 0 || head.nk == 0) continue;
      const std::int64_t tile = store ? head.nk : kTile;
      for (const Head& h : row_tiles(head, store != nullptr))
        for (std::int64_t j0 = 0; j0 < h.nk; j0 += tile) {
          const std::int64_t nj = std::min(tile, h.nk - j0);
          Tensor<T> s =
              store ? store->slice(at, Shape{h.nq, nj}) : scratch.slice(0, Shape{h.nq, nj});
          if (store) at += h.nq * nj;
          logits(h, j0, nj, xq, xk, s);
          const detail::Tile t = tile_of(h, j0, nj, bq, own);
          if (kind_ == Kind::siglip)
            st.loss += detail::siglip_tile_loss(t, s.view());
          else
            detail::fold_tile(kind_, t, s.view(), st.rows);
        }
    }
  }

  // After every block: log-sum-exps and the weighted loss terms of these query rows.
  double finish(Stats& st) const {
    if (kind_ == Kind::siglip) return weight_ * st.loss;
    return weight_ * detail::finish_rows(st.rows);
  }

  // The gradient of the block: dxq += d/dxq, dxk += d/dxk (either may be null: not wanted), and
  // dt += d/d(log scale) (the logits' alpha times their similarity), dbias += d/d(bias). `seed`
  // scales everything. With `stored`, the logits come from forward_block's store (and are
  // overwritten), else they are recomputed tile by tile in scratch.
  void backward_block(const Tensor<T>& xq, std::int64_t bq, const Tensor<T>& xk, std::int64_t bk,
                      bool own, const Stats& st, double seed, Tensor<T>* stored, std::int64_t at,
                      Tensor<T>& scratch, Tensor<T>* dxq, Tensor<T>* dxk, double& dt,
                      double& dbias) const {
    const std::int64_t d = layout_.dim;
    const double w = weight_ * seed;
    for (const Head& head : heads(bq, bk)) {
      if (head.nq == 0 || head.nk == 0) continue;
      const std::int64_t tile = stored ? head.nk : kTile;
      for (const Head& h : row_tiles(head, stored != nullptr))
        for (std::int64_t j0 = 0; j0 < h.nk; j0 += tile) {
          const std::int64_t nj = std::min(tile, h.nk - j0);
          Tensor<T> g;
          if (stored) {
            g = stored->slice(at, Shape{h.nq, nj});  // overwritten with the logits' gradient
            at += h.nq * nj;
          } else {
            g = scratch.slice(0, Shape{h.nq, nj});
            logits(h, j0, nj, xq, xk, g);
          }
          if (static_cast<std::int64_t>(partial_.extent(0)) < 2 * h.nq)
            partial_ = Kokkos::View<double*, MemSpace>(
                Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::contrastive::partial"),
                2 * h.nq);
          const std::array<double, 2> sums = detail::tile_gradient(
              kind_, tile_of(h, j0, nj, bq, own), g.view(), st.rows, w, bias_, partial_);
          dt += sums[0];
          dbias += sums[1];
          const T alpha = static_cast<T>(alpha_);
          if (dxq) {
            Tensor<T> dq = dxq->slice(h.q0 * d, Shape{h.nq, d});
            const Tensor<T> k = xk.slice((h.k0 + j0) * d, Shape{nj, d});
            kernels::gemm(kernels::Op::N, kernels::Op::N, alpha, g, k, T(1), dq);
          }
          if (dxk) {
            Tensor<T> dk = dxk->slice((h.k0 + j0) * d, Shape{nj, d});
            const Tensor<T> q = xq.slice(h.q0 * d, Shape{h.nq, d});
            kernels::gemm(kernels::Op::T, kernels::Op::N, alpha, g, q, T(1), dk);
          }
        }
    }
  }

  // Entries of the scratch buffer of a block computed tile by tile.
  std::int64_t scratch_entries(std::int64_t bq, std::int64_t bk) const {
    std::int64_t n = 1;
    for (const Head& h : heads(bq, bk))
      n = std::max(n, std::min(kRowTile, h.nq) * std::min(kTile, h.nk));
    return n;
  }

 private:
  Kind kind_;
  const Layout& layout_;
  double alpha_, bias_, weight_;
  // Per-row partial sums of tile_gradient, grown to the largest tile seen.
  mutable Kokkos::View<double*, MemSpace> partial_;
};

// Counts and displacements (in elements) of every rank's payload of 2 rows[c] rows of D.
struct Counts {
  std::vector<int> count, displ;
};
Counts payload_counts(const Layout& l) {
  Counts c;
  int at = 0;
  for (int r = 0; r < l.size; ++r) {
    const std::int64_t n = 2 * l.rows[r] * l.dim;
    DISTOP_CHECK(n <= std::numeric_limits<int>::max() && at + n <= std::numeric_limits<int>::max(),
                 "contrastive loss", "payload of ", n, " elements exceeds MPI's int counts");
    c.count.push_back(static_cast<int>(n));
    c.displ.push_back(at);
    at += static_cast<int>(n);
  }
  return c;
}

Layout make_layout(MPI_Comm comm, const char* op, std::int64_t rows, std::int64_t dim) {
  Layout l;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &l.size), op);
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &l.rank), op);
  std::vector<std::int64_t> mine = {rows, dim}, all(2 * l.size);
  DISTOP_MPI_CHECK(MPI_Allgather(mine.data(), 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm),
                   op);
  l.dim = all[1];
  for (int r = 0; r < l.size; ++r) {
    l.rows.push_back(all[2 * r]);
    l.offset.push_back(l.batch);
    l.batch += all[2 * r];
    l.max_rows = std::max(l.max_rows, all[2 * r]);
    // Every rank sees the same table, so every rank throws the same error.
    DISTOP_CHECK(all[2 * r + 1] == l.dim, op, "rank ", r, " of batch_comm holds rows of dimension ",
                 all[2 * r + 1], " but rank 0 holds rows of dimension ", l.dim);
  }
  DISTOP_CHECK(l.batch > 0, op, "the global batch is empty (no rank holds rows)");
  return l;
}

// The operators that move one batch layout's rows (ContrastiveMovers), made on first use and
// cached on batch_comm. Every rank of batch_comm agrees on the layout (make_layout), so every rank
// finds or makes the same operators in the same order: their collective constructors always meet.
template <class T>
using Movers = detail::ContrastiveMovers<T>;

struct MoverCache {
  struct Entry {
    std::vector<std::int64_t> key;
    std::shared_ptr<const void> movers;
  };
  std::vector<Entry> entries;  // the most recently used last
  // Two doubles replicated on every rank of the communicator (a [2] tensor whose one grid axis of
  // P ranks replicates it) and their AllSumReduce over that axis (self-adjoint): the sums over the
  // ranks of the scalar parameters' gradients. Its partition, a 1-D grid of the communicator's
  // ranks, is the loss's. One per communicator, whatever the layouts.
  std::shared_ptr<const AllSumReduce<double>> sum;
};
// Layouts kept per communicator (a training loop uses one or two: the full batch and the last).
constexpr std::size_t kCachedLayouts = 4;

int cache_keyval = MPI_KEYVAL_INVALID;
std::set<MoverCache*>& live_caches() {
  static std::set<MoverCache*> caches;
  return caches;
}

// MPI_Comm_free(batch_comm) (or MPI_Finalize) deletes the communicator's cache.
int free_cache(MPI_Comm, int, void* attribute, void*) {
  auto* cache = static_cast<MoverCache*>(attribute);
  live_caches().erase(cache);
  delete cache;
  return MPI_SUCCESS;
}

MoverCache& mover_cache(MPI_Comm comm, const char* op) {
  if (cache_keyval == MPI_KEYVAL_INVALID) {
    DISTOP_MPI_CHECK(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_cache, &cache_keyval, nullptr), op);
    // The operators hold Kokkos memory and communicators: release them while Kokkos (which
    // Environment finalises before MPI) and MPI still run.
    Kokkos::push_finalize_hook([] {
      for (MoverCache* cache : live_caches()) {
        cache->entries.clear();
        cache->sum.reset();
      }
    });
  }
  void* attribute = nullptr;
  int found = 0;
  DISTOP_MPI_CHECK(MPI_Comm_get_attr(comm, cache_keyval, &attribute, &found), op);
  if (found) return *static_cast<MoverCache*>(attribute);
  auto cache = std::make_unique<MoverCache>();
  DISTOP_MPI_CHECK(MPI_Comm_set_attr(comm, cache_keyval, cache.get()), op);
  live_caches().insert(cache.get());
  return *cache.release();
}

// The cached operators of this layout and strategy (collective over comm when they are made).
template <class T>
std::shared_ptr<const Movers<T>> movers(MPI_Comm comm, const char* op, const Layout& l,
                                        ContrastiveStrategy strategy, int root) {
  std::vector<std::int64_t> key = {static_cast<std::int64_t>(sizeof(T)),
                                   static_cast<std::int64_t>(strategy),
                                   strategy == ContrastiveStrategy::gather ? root : 0, l.dim};
  key.insert(key.end(), l.rows.begin(), l.rows.end());
  MoverCache& cache = mover_cache(comm, op);
  for (std::size_t i = 0; i < cache.entries.size(); ++i)
    if (cache.entries[i].key == key) {
      MoverCache::Entry hit = std::move(cache.entries[i]);
      cache.entries.erase(cache.entries.begin() + static_cast<std::ptrdiff_t>(i));
      cache.entries.push_back(std::move(hit));
      return std::static_pointer_cast<const Movers<T>>(cache.entries.back().movers);
    }
  std::shared_ptr<const Movers<T>> made =
      detail::make_contrastive_movers<T>(comm, l.rows, l.dim, strategy, root);
  if (cache.entries.size() >= kCachedLayouts) cache.entries.erase(cache.entries.begin());
  cache.entries.push_back({std::move(key), made});
  return made;
}

// The cached AllSumReduce of two doubles over comm (collective over comm when it is made), on a
// 1-D grid of comm's ranks.
std::shared_ptr<const AllSumReduce<double>> pair_sum(MPI_Comm comm, const char* op) {
  MoverCache& cache = mover_cache(comm, op);
  if (!cache.sum) {
    int size = 1;
    DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), op);
    const Shape line{size};
    const TensorSpace pair(Partition(comm, line), Decomposition::balanced(Shape{2}, line, {-1}));
    cache.sum = std::make_shared<const AllSumReduce<double>>(pair, std::vector<int>{0});
  }
  return cache.sum;
}

// t (this rank's box of `space`, or anything when the box is empty) as a DistTensor of space.
template <class T>
DistTensor<T> in_space(const TensorSpace& space, const Tensor<T>& t) {
  const Shape& box = space.local_shape();
  if (box.numel() == 0) return DistTensor<T>::uninitialized(space);
  return DistTensor<T>::from_local(space, t.slice(0, box));
}

// A ring buffer of cap >= 2 max_rows D entries as this rank's box of a link's domain or range.
template <class T>
DistTensor<T> link_buffer(const TensorSpace& space, const Tensor<T>& buffer) {
  return DistTensor<T>::from_local(space, buffer.slice(0, space.local_shape()));
}

// An operator's forward (adjoint) called into a given output, seen as distop::apply's are: on the
// timers and the trace under its name ("<name>.adjoint" for the adjoint), and named by the hang
// watchdog's report (comm::OperatorScope).
template <class T>
void run_forward(const LinearOperator<T>& op, const DistTensor<T>& x, DistTensor<T>& y) {
  const timers::Scope timer(timers::enabled() ? op.name() : std::string());
  const comm::OperatorScope scope(&op, &LinearOperator<T>::describe_for_watchdog, false);
  op.forward(x, y);
}
template <class T>
void run_adjoint(const LinearOperator<T>& op, const DistTensor<T>& y, DistTensor<T>& x) {
  const timers::Scope timer(timers::enabled() ? op.name() + ".adjoint" : std::string());
  const comm::OperatorScope scope(&op, &LinearOperator<T>::describe_for_watchdog, true);
  op.adjoint(y, x);
}

// The sums over the ranks of batch_comm of each rank's x0 and x1 (the scalars' gradients), by
// batch_comm's AllSumReduce on a [2] tensor in the tensors' memory space.
// AllSumReduce adds in one order and hands every rank the same sum (MPICH's allreduce adds
// commutatively, so the ranks agree bit for bit).
std::array<double, 2> sum_over_ranks(const AllSumReduce<double>& op, double x0, double x1) {
  const DistTensor<double> mine =
      DistTensor<double>::from_local(op.domain(), Tensor<double>::from_vector(Shape{2}, {x0, x1}));
  DistTensor<double> sum = DistTensor<double>::uninitialized(op.range());
  run_forward<double>(op, mine, sum);
  const std::vector<double> v = sum.local().to_vector();
  return {v[0], v[1]};
}

// The saved state of one forward pass, shared by the strategies.
template <class T>
struct Saved {
  Layout layout;
  Counts counts;       // every rank's payload, in elements
  Tensor<T> payload;   // this rank's rows [a; b]
  Tensor<T> gathered;  // allgather, allgather_nograd, the gather root: every rank's payload
  Tensor<T> ring_end;  // ring: the block held at the end of the forward ring (rank + 1's)
  Tensor<T> stored;    // allgather: own queries' logits; allgather_nograd and gather: all
  std::vector<typename Engine<T>::Stats> stats;  // per query payload computed here
  std::shared_ptr<const Movers<T>> movers;
  std::shared_ptr<const AllSumReduce<double>> sum;

  Tensor<T> payload_of(int c) const {
    return gathered.slice(counts.displ[c], Shape{2 * layout.rows[c], layout.dim});
  }
};

// What the backward pass needs besides the saved tensors.
struct Params {
  Kind kind;
  ContrastiveStrategy strategy;
  MPI_Comm comm;
  int root;
  double alpha, bias, weight;
  bool clamped;  // CLIP's log scale above log 100: no gradient reaches it
  bool has_scale, has_bias;
};

// Every query payload against every key payload, logits stored (allgather_nograd, gather root).
// Returns the loss terms of each rank's rows (query payload q's at q).
template <class T>
std::vector<double> forward_all(Saved<T>& sv, const Engine<T>& engine) {
  const Layout& l = sv.layout;
  std::int64_t total = 0;
  for (int q = 0; q < l.size; ++q)
    for (int c = 0; c < l.size; ++c) total += engine.block_entries(l.rows[q], l.rows[c]);
  sv.stored = Tensor<T>::uninitialized(Shape{std::max<std::int64_t>(total, 1)},
                                       "distop::contrastive::logits");
  sv.stats.resize(l.size);
  Tensor<T> none;
  std::int64_t at = 0;
  std::vector<double> parts(static_cast<std::size_t>(l.size));
  for (int q = 0; q < l.size; ++q) {
    sv.stats[q].reset(engine.stat_rows(l.rows[q]));
    for (int c = 0; c < l.size; ++c) {
      engine.forward_block(sv.payload_of(q), l.rows[q], sv.payload_of(c), l.rows[c], q == c,
                           sv.stats[q], &sv.stored, at, none);
      at += engine.block_entries(l.rows[q], l.rows[c]);
    }
    parts[static_cast<std::size_t>(q)] = engine.finish(sv.stats[q]);
  }
  return parts;
}

// This rank's component of the loss (the ranks' components sum to it): the loss terms of its own
// rows, but under the gather strategy, where the root holds the whole loss and the others 0. Fills
// sv for the backward pass. Communicates only to move the rows.
template <class T>
double forward_pass(Saved<T>& sv, const Params& prm, const Engine<T>& engine) {
  const Layout& l = sv.layout;
  const int p = l.rank, P = l.size;
  const std::int64_t d = l.dim, rows = l.rows[p];
  switch (prm.strategy) {
    case ContrastiveStrategy::allgather_nograd:
    case ContrastiveStrategy::allgather: {
      // Every rank's rows gathered (AllGather, or a Repartition onto every rank for
      // allgather_nograd when some rank holds none).
      const LinearOperator<T>& gather = *sv.movers->gather;
      DistTensor<T> all = DistTensor<T>::uninitialized(gather.range());
      run_forward(gather, in_space(sv.movers->rows, sv.payload), all);
      sv.gathered = all.local();
      if (prm.strategy == ContrastiveStrategy::allgather_nograd)
        return forward_all(sv, engine)[static_cast<std::size_t>(p)];
      std::int64_t total = 0;
      for (int c = 0; c < P; ++c) total += engine.block_entries(rows, l.rows[c]);
      sv.stored = Tensor<T>::uninitialized(Shape{std::max<std::int64_t>(total, 1)},
                                           "distop::contrastive::logits");
      sv.stats.resize(1);
      sv.stats[0].reset(engine.stat_rows(rows));
      Tensor<T> none;
      std::int64_t at = 0;
      for (int c = 0; rows > 0 && c < P; ++c) {  // a rank without rows gathers nothing
        engine.forward_block(sv.payload, rows, sv.payload_of(c), l.rows[c], c == p, sv.stats[0],
                             &sv.stored, at, none);
        at += engine.block_entries(rows, l.rows[c]);
      }
      return engine.finish(sv.stats[0]);
    }
    case ContrastiveStrategy::gather: {
      const LinearOperator<T>& gather = *sv.movers->gather;
      DistTensor<T> all = DistTensor<T>::uninitialized(gather.range());
      run_forward(gather, in_space(sv.movers->rows, sv.payload), all);
      sv.gathered = all.local();  // empty but on the root
      if (p != prm.root) return 0.0;
      const std::vector<double> parts = forward_all(sv, engine);
      double loss = 0;
      for (double part : parts) loss += part;
      return loss;
    }
    case ContrastiveStrategy::ring: {
      const std::int64_t cap = std::max<std::int64_t>(2 * l.max_rows * d, 1);
      Tensor<T> cur = Tensor<T>::uninitialized(Shape{cap}, "distop::contrastive::ring");
      Tensor<T> next = Tensor<T>::uninitialized(Shape{cap}, "distop::contrastive::ring");
      if (rows > 0) cur.slice(0, sv.payload.shape()).copy_from(sv.payload);
      Tensor<T> tile = Tensor<T>::uninitialized(Shape{engine.scratch_entries(rows, l.max_rows)},
                                                "distop::contrastive::tile");
      sv.stats.resize(1);
      sv.stats[0].reset(engine.stat_rows(rows));
      for (int k = 0; k < P; ++k) {
        const int c = (p - k + P) % P;  // the owner of the block held at step k
        comm::Request recv, send;
        if (k + 1 < P) {  // pass the block on (links[p]) while computing with it
          const SendRecv<T>& in = *sv.movers->links[(p + P - 1) % P];           // p - 1 -> p
          const SendRecv<T>& out = *sv.movers->links[p];                        // p -> p + 1
          DistTensor<T> from_prev = DistTensor<T>::uninitialized(in.domain());  // empty here
          DistTensor<T> into = link_buffer(in.range(), next);
          recv = in.start_forward(from_prev, into);
          DistTensor<T> to_next = DistTensor<T>::uninitialized(out.range());  // empty here
          send = out.start_forward(link_buffer(out.domain(), cur), to_next);
        }
        engine.forward_block(sv.payload, rows, cur.slice(0, Shape{2 * l.rows[c], d}), l.rows[c],
                             c == p, sv.stats[0], nullptr, 0, tile);
        recv.wait();
        send.wait();
        if (k + 1 < P) std::swap(cur, next);
      }
      // The block held last, rank p + 1's, starts the backward ring.
      sv.ring_end = cur.slice(0, Shape{2 * l.rows[(p + 1) % P], d}).clone();
      return engine.finish(sv.stats[0]);
    }
  }
  return 0;
}

// dx = the gradient of seed * L with respect to this rank's payload; returns the total gradients
// of seed * L with respect to the log scale and the bias (the same on every rank).
template <class T>
std::array<double, 2> backward_pass(Saved<T>& sv, const Params& prm, const Engine<T>& engine,
                                    double seed, Tensor<T>& dx) {
  const Layout& l = sv.layout;
  const int p = l.rank, P = l.size;
  const std::int64_t d = l.dim, rows = l.rows[p];
  const Counts& counts = sv.counts;
  double dt = 0, dbias = 0;
  Tensor<T> none;
  // All blocks, from the stored logits: this rank's gradient only (dall null), or every rank's.
  auto backward_all = [&](Tensor<T>* dall) {
    std::int64_t at = 0;
    for (int q = 0; q < P; ++q)
      for (int c = 0; c < P; ++c) {
        Tensor<T> gq, gc;
        if (dall) {
          gq = dall->slice(counts.displ[q], Shape{2 * l.rows[q], d});
          gc = dall->slice(counts.displ[c], Shape{2 * l.rows[c], d});
        }
        Tensor<T>* dq = dall ? &gq : (q == p ? &dx : nullptr);
        Tensor<T>* dk = dall ? &gc : (c == p ? &dx : nullptr);
        engine.backward_block(sv.payload_of(q), l.rows[q], sv.payload_of(c), l.rows[c], q == c,
                              sv.stats[q], seed, &sv.stored, at, none, dq, dk, dt, dbias);
        at += engine.block_entries(l.rows[q], l.rows[c]);
      }
  };
  switch (prm.strategy) {
    case ContrastiveStrategy::allgather_nograd:
      backward_all(nullptr);  // no communication: every rank has the whole loss
      return {dt, dbias};
    case ContrastiveStrategy::gather: {
      // Zeros but on the root, which computes every row's gradient.
      const LinearOperator<T>& gather = *sv.movers->gather;
      DistTensor<T> dall(gather.range());
      if (p == prm.root) backward_all(&dall.local());
      // The adjoint of the gather, a scatter, overwrites dx with this rank's rows' gradient.
      DistTensor<T> mine = in_space(sv.movers->rows, dx);
      run_adjoint(gather, dall, mine);
      // One rank: the gather is a pass-through, whose adjoint hands back dall's storage instead.
      if (rows > 0 && mine.data() != dx.data())
        dx.slice(0, Shape{2 * rows, d}).copy_from(mine.local());
      return sum_over_ranks(*sv.sum, dt, dbias);  // zeros but on the root
    }
    case ContrastiveStrategy::allgather: {
      const LinearOperator<T>& gather = *sv.movers->gather;
      DistTensor<T> dall(gather.range());  // zeros; empty on a rank without rows
      std::int64_t at = 0;
      for (int c = 0; rows > 0 && c < P; ++c) {
        Tensor<T> gc = dall.local().slice(counts.displ[c], Shape{2 * l.rows[c], d});
        engine.backward_block(sv.payload, rows, sv.payload_of(c), l.rows[c], c == p, sv.stats[0],
                              seed, &sv.stored, at, none, &dx, &gc, dt, dbias);
        at += engine.block_entries(rows, l.rows[c]);
      }
      sv.stored = Tensor<T>();
      // The adjoint of the all-gather, a reduce-scatter, returns each block's summed copies.
      DistTensor<T> mine = DistTensor<T>::uninitialized(sv.movers->rows);
      run_adjoint(gather, dall, mine);
      if (rows > 0) {  // a rank without rows has nothing to add
        Tensor<T> g = dx.slice(0, Shape{2 * rows, d});
        kernels::axpy(T(1), mine.local(), g);
      }
      return sum_over_ranks(*sv.sum, dt, dbias);
    }
    case ContrastiveStrategy::ring: {
      // The forward ring replayed in reverse: at step k (k = P-1 .. 0) this rank holds block
      // c = p - k with the gradient the ranks after it gave that block; it adds its own share
      // and hands both back to rank p - 1 (the adjoint of the forward send p - 1 -> p), so that
      // at k = 0 every rank holds its own block with every rank's contribution.
      const std::int64_t cap = std::max<std::int64_t>(2 * l.max_rows * d, 1);
      Tensor<T> x_cur = Tensor<T>::uninitialized(Shape{cap}, "distop::contrastive::ring");
      Tensor<T> x_next = Tensor<T>::uninitialized(Shape{cap}, "distop::contrastive::ring");
      Tensor<T> g_cur(Shape{cap}, "distop::contrastive::ring_grad");
      Tensor<T> g_next = Tensor<T>::uninitialized(Shape{cap}, "distop::contrastive::ring_grad");
      if (sv.ring_end.numel() > 0) x_cur.slice(0, sv.ring_end.shape()).copy_from(sv.ring_end);
      sv.ring_end = Tensor<T>();
      Tensor<T> tile = Tensor<T>::uninitialized(Shape{engine.scratch_entries(rows, l.max_rows)},
                                                "distop::contrastive::tile");
      for (int k = P - 1; k >= 0; --k) {
        const int c = (p - k + P) % P;
        const int cn = (c + 1) % P;  // the block held at step k - 1
        // Both the block and its gradient go back to p - 1 by the adjoint of the forward link
        // p - 1 -> p, and come from p + 1 by the adjoint of the link p -> p + 1. The block and the
        // gradient travel on the same link, the block first: MPI matches messages between two
        // ranks on one communicator and tag in the order they were posted.
        comm::Request recv_x, send_x, recv_g, send_g;
        if (k > 0) {
          const SendRecv<T>& back = *sv.movers->links[(p + P - 1) % P];  // adjoint: p -> p - 1
          const SendRecv<T>& ahead = *sv.movers->links[p];               // adjoint: p + 1 -> p
          DistTensor<T> from_next = DistTensor<T>::uninitialized(ahead.range());  // empty here
          DistTensor<T> to_prev = DistTensor<T>::uninitialized(back.domain());    // empty here
          DistTensor<T> x_into = link_buffer(ahead.domain(), x_next);
          DistTensor<T> g_into = link_buffer(ahead.domain(), g_next);
          recv_x = ahead.start_adjoint(from_next, x_into);
          send_x = back.start_adjoint(link_buffer(back.range(), x_cur), to_prev);
          recv_g = ahead.start_adjoint(from_next, g_into);
        }
        Tensor<T> gk = c == p ? dx : g_cur.slice(0, Shape{2 * l.rows[c], d});
        engine.backward_block(sv.payload, rows, x_cur.slice(0, Shape{2 * l.rows[c], d}), l.rows[c],
                              c == p, sv.stats[0], seed, nullptr, 0, tile, &dx, &gk, dt, dbias);
        if (k == 0) break;
        {
          const SendRecv<T>& back = *sv.movers->links[(p + P - 1) % P];
          DistTensor<T> to_prev = DistTensor<T>::uninitialized(back.domain());
          send_g = back.start_adjoint(link_buffer(back.range(), g_cur), to_prev);
        }
        recv_x.wait();
        send_x.wait();
        recv_g.wait();
        send_g.wait();
        std::swap(x_cur, x_next);
        std::swap(g_cur, g_next);
        if (cn == p) {  // this rank's own block came home with every other rank's contribution
          if (rows > 0) {
            Tensor<T> gd = dx.slice(0, Shape{2 * rows, d});
            kernels::axpy(T(1), g_cur.slice(0, Shape{2 * rows, d}), gd);
          }
        }
      }
      return sum_over_ranks(*sv.sum, dt, dbias);
    }
  }
  return {0, 0};
}

template <class T>
Var<T> contrastive(Tape& tape, Kind kind, Var<T> a, Var<T> b, const Var<T>* scale_var,
                   const Var<T>* bias_var, double temperature, MPI_Comm comm,
                   const ContrastiveOptions& options) {
  const char* op = kind_name(kind);
  // Local checks, agreed on so that every rank throws the same error.
  std::string problem;
  const Tensor<T>& la = a.value().local();
  const Tensor<T>& lb = b.value().local();
  if (la.rank() != 2 || lb.rank() != 2)
    problem = "expected a and b of local shape [rows, D], found " + la.shape().str() + " and " +
              lb.shape().str();
  else if (la.shape() != lb.shape())
    problem = "a and b must have the same local shape, found " + la.shape().str() + " and " +
              lb.shape().str();
  else if (la.extent(1) < 1)
    problem = "the embedding dimension D must be at least 1, found " + la.shape().str();
  for (const Var<T>* v : {scale_var, bias_var})
    if (v && problem.empty() && v->value().local_numel() != 1)
      problem = std::string("expected ") + (v == scale_var ? "logit_scale" : "logit_bias") +
                " of one element, found local shape " + v->value().local().shape().str();
  comm::agree_ok(comm, op, problem.empty(), problem);
  const std::int64_t rows = la.extent(0), dim = la.extent(1);

  auto saved = std::make_shared<Saved<T>>();
  saved->layout = make_layout(comm, op, rows, dim);
  const Layout& l = saved->layout;
  DISTOP_CHECK(kind != Kind::ntxent || (temperature > 0 && std::isfinite(temperature)), op,
               "the temperature must be positive and finite, found ", temperature);
  DISTOP_CHECK(options.strategy != ContrastiveStrategy::gather ||
                   (options.root >= 0 && options.root < l.size),
               op, "root ", options.root, " is not a rank of batch_comm (size ", l.size, ")");
  saved->counts = payload_counts(l);
  saved->movers = movers<T>(comm, op, l, options.strategy, options.root);
  saved->sum = pair_sum(comm, op);

  if (options.normalize) {
    a = nn::normalize(tape, a);
    b = nn::normalize(tape, b);
  }

  const double log_scale = scale_var ? double(scale_var->value().local().to_vector()[0]) : 0.0;
  const double log_cap = std::log(100.0);
  Params prm{};
  prm.kind = kind;
  prm.strategy = options.strategy;
  prm.comm = comm;
  prm.root = options.root;
  prm.clamped = kind == Kind::clip && log_scale > log_cap;
  prm.alpha = kind == Kind::ntxent ? 1.0 / temperature
              : kind == Kind::clip ? std::exp(std::min(log_scale, log_cap))
                                   : std::exp(log_scale);
  prm.bias = bias_var ? double(bias_var->value().local().to_vector()[0]) : 0.0;
  prm.weight = kind == Kind::siglip ? 1.0 / double(l.batch) : 0.5 / double(l.batch);
  prm.has_scale = scale_var != nullptr;
  prm.has_bias = bias_var != nullptr;

  FunctionInputs<T> inputs = {a, b};
  if (scale_var) inputs.push_back(*scale_var);
  if (bias_var) inputs.push_back(*bias_var);
  // The loss's partition: every rank of batch_comm, each holding its component.
  const Partition& ranks = saved->sum->domain().partition();
  auto compute = [&] {
    const std::int64_t d = l.dim;
    saved->payload = Tensor<T>::uninitialized(Shape{std::max<std::int64_t>(2 * rows * d, 1)},
                                              "distop::contrastive::payload");
    saved->payload = saved->payload.slice(0, Shape{2 * rows, d});
    if (rows > 0) {
      saved->payload.slice(0, Shape{rows, d}).copy_from(a.value().local());
      saved->payload.slice(rows * d, Shape{rows, d}).copy_from(b.value().local());
    }
    const Engine<T> engine(kind, saved->layout, prm.alpha, prm.bias, prm.weight);
    const double component = forward_pass(*saved, prm, engine);

    // Exact for a seed equal on every rank (backward(tape, loss) seeds 1): each rank's rows receive
    // the seed times the loss's gradient with respect to them, whichever rank computed it.
    auto backward = [saved, prm](const DistTensor<T>& dy, Gradients<T>& grads) {
      const Engine<T> eng(prm.kind, saved->layout, prm.alpha, prm.bias, prm.weight);
      const double seed = dy.local_numel() > 0 ? double(dy.local().to_vector()[0]) : 0.0;
      const std::int64_t n = 2 * saved->layout.rows[saved->layout.rank] * saved->layout.dim;
      Tensor<T> dx(Shape{std::max<std::int64_t>(n, 1)}, "distop::contrastive::grad");
      const std::array<double, 2> scalars = backward_pass(*saved, prm, eng, seed, dx);
      // Each rank's copy of a scalar parameter takes 1/P of its gradient.
      const double share = 1.0 / saved->layout.size;
      auto add_scalar = [&](std::size_t input, double v) {
        grads.accumulate(input, [&](T beta, Tensor<T>& g) {
          const double old = beta == T(0) ? 0.0 : double(beta) * double(g.to_vector()[0]);
          g.fill(static_cast<T>(old + v));
        });
      };
      if (prm.has_scale) add_scalar(2, prm.clamped ? 0.0 : scalars[0] * share);
      if (prm.has_bias) add_scalar(prm.has_scale ? 3 : 2, scalars[1] * share);
      for (std::size_t set = 0; set < 2; ++set)
        grads.accumulate(set, [&](T beta, Tensor<T>& g) {
          if (n == 0) return;  // no rows here
          const Tensor<T> in = dx.slice(static_cast<std::int64_t>(set) * (n / 2), g.shape());
          if (beta == T(0))
            g.copy_from(in);
          else
            kernels::axpby(T(1), in, beta, g);
        });
    };
    return Computed{detail::scalar<T>(ranks, component), std::move(backward)};
  };
  // The backward moves rows and sums the scalars' gradients: collective.
  return make_function<T>(tape, op, std::move(inputs), compute,
                          FunctionOptions{.collective = true});
}

}  // namespace

namespace detail {

template <class T>
std::shared_ptr<const ContrastiveMovers<T>> make_contrastive_movers(
    MPI_Comm comm, const std::vector<std::int64_t>& rows, std::int64_t dim,
    ContrastiveStrategy strategy, int root) {
  auto mv = std::make_shared<ContrastiveMovers<T>>();
  const int P = static_cast<int>(rows.size());
  std::int64_t batch = 0, max_rows = 0;
  for (std::int64_t r : rows) {
    batch += r;
    max_rows = std::max(max_rows, r);
  }
  if (strategy == ContrastiveStrategy::ring) {
    for (int c = 0; P > 1 && c < P; ++c)
      mv->links.push_back(
          std::make_unique<SendRecv<T>>(comm, Shape{2 * max_rows, dim}, c, (c + 1) % P));
    return mv;
  }
  std::vector<int> holders;
  std::vector<std::int64_t> extents;
  for (int c = 0; c < P; ++c)
    if (rows[c] > 0) {
      holders.push_back(c);
      extents.push_back(2 * rows[c]);
    }
  const auto n = static_cast<std::int64_t>(holders.size());
  const Shape global{2 * batch, dim};
  const Partition part(comm, Shape{n, 1}, holders);
  mv->rows = TensorSpace(part, Decomposition::blocks(global, Shape{n, 1}, {extents, {dim}}));
  if (strategy == ContrastiveStrategy::gather) {
    mv->gather = std::make_unique<Gather<T>>(mv->rows, root);
  } else if (strategy == ContrastiveStrategy::allgather || n == P) {
    mv->gather = std::make_unique<AllGather<T>>(mv->rows, std::vector<int>{0});
  } else {
    const Shape grid{P, 1};
    const TensorSpace everywhere(
        Partition(part.parent(), grid),
        Decomposition::blocks(global, grid, {{2 * batch}, {dim}}, std::vector<int>{-1, -1}));
    mv->gather = std::make_unique<Repartition<T>>(mv->rows, everywhere);
  }
  return mv;
}

template std::shared_ptr<const ContrastiveMovers<float>> make_contrastive_movers<float>(
    MPI_Comm, const std::vector<std::int64_t>&, std::int64_t, ContrastiveStrategy, int);
template std::shared_ptr<const ContrastiveMovers<double>> make_contrastive_movers<double>(
    MPI_Comm, const std::vector<std::int64_t>&, std::int64_t, ContrastiveStrategy, int);

}  // namespace detail

std::string_view strategy_name(ContrastiveStrategy strategy) {
  return kStrategyNames.at(static_cast<std::size_t>(strategy));
}

std::span<const std::string_view> strategy_names() { return kStrategyNames; }

ContrastiveStrategy parse_strategy(std::string_view name) {
  for (std::size_t i = 0; i < kStrategyNames.size(); ++i)
    if (kStrategyNames[i] == name) return static_cast<ContrastiveStrategy>(i);
  std::string valid;
  for (std::string_view n : kStrategyNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw Error("parse_strategy",
              "unknown contrastive strategy '" + std::string(name) + "'; expected one of " + valid);
}

template <class T>
Var<T> ntxent(Tape& tape, const Var<T>& a, const Var<T>& b, T temperature, MPI_Comm batch_comm,
              const ContrastiveOptions& options) {
  return contrastive<T>(tape, Kind::ntxent, a, b, nullptr, nullptr, double(temperature), batch_comm,
                        options);
}

template <class T>
Var<T> clip_loss(Tape& tape, const Var<T>& a, const Var<T>& b, const Var<T>& logit_scale,
                 MPI_Comm batch_comm, const ContrastiveOptions& options) {
  return contrastive<T>(tape, Kind::clip, a, b, &logit_scale, nullptr, 1.0, batch_comm, options);
}

template <class T>
Var<T> siglip_loss(Tape& tape, const Var<T>& a, const Var<T>& b, const Var<T>& logit_scale,
                   const Var<T>& logit_bias, MPI_Comm batch_comm,
                   const ContrastiveOptions& options) {
  return contrastive<T>(tape, Kind::siglip, a, b, &logit_scale, &logit_bias, 1.0, batch_comm,
                        options);
}

#define DISTOP_INSTANTIATE(T)                                                                    \
  template Var<T> ntxent(Tape&, const Var<T>&, const Var<T>&, T, MPI_Comm,                       \
                         const ContrastiveOptions&);                                             \
  template Var<T> clip_loss(Tape&, const Var<T>&, const Var<T>&, const Var<T>&, MPI_Comm,        \
                            const ContrastiveOptions&);                                          \
  template Var<T> siglip_loss(Tape&, const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&, \
                              MPI_Comm, const ContrastiveOptions&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::loss
