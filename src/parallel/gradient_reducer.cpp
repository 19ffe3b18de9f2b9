#include "gradient_reducer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <type_traits>

#include "distop/autodiff/apply.hpp"
#include "distop/comm/backend.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/axpy.hpp"

namespace distop::parallel {

namespace {

constexpr const char* kOp = "GradientReducer";

// Whether every rank of `p` lies in this rank's replica (ranks [first, first + count) of world).
bool within_replica(const Partition& p, MPI_Comm world, int first, int count) {
  MPI_Group parent = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  DISTOP_MPI_CHECK(MPI_Comm_group(p.parent(), &parent), kOp);
  DISTOP_MPI_CHECK(MPI_Comm_group(world, &world_group), kOp);
  std::vector<int> in_world(p.ranks().size());
  const int translated =
      MPI_Group_translate_ranks(parent, static_cast<int>(p.ranks().size()), p.ranks().data(),
                                world_group, in_world.data());
  // Unchecked: freeing a group handle releases a local object; nothing worth reporting.
  MPI_Group_free(&parent);
  MPI_Group_free(&world_group);
  DISTOP_MPI_CHECK(translated, kOp);
  return std::all_of(in_world.begin(), in_world.end(),
                     [&](int r) { return r != MPI_UNDEFINED && r >= first && r < first + count; });
}

int to_int(std::int64_t n) {
  DISTOP_CHECK(n <= std::numeric_limits<int>::max(), kOp, "a bucket of ", n,
               " entries exceeds MPI's int count limit; lower the bucket capacity");
  return static_cast<int>(n);
}

// out = (in_0 + in_1 + ... + in_{R-1}) * scale for the R blocks of `n` entries of `in` (block q at
// offset q n), entry by entry: the replicas' sum of each entry in replica order, whatever n is.
// Kokkos kernels (kernels::axpy with alpha 1 adds exactly), so that device buffers work too.
template <class T>
void sum_in_order(const Tensor<T>& in, std::int64_t n, int replicas, T scale, Tensor<T> out) {
  if (n == 0) return;
  out.copy_from(in.slice(0, Shape{n}));
  for (int q = 1; q < replicas; ++q)
    kernels::axpy(T(1), in.slice(static_cast<std::int64_t>(q) * n, Shape{n}), out);
  if (scale != T(1)) kernels::scale(scale, out);
}

// n / R entries to each chunk and one more to the first n % R, as balanced_bounds (which refuses
// empty chunks) splits: R + 1 offsets.
std::vector<std::int64_t> chunk_bounds_of(std::int64_t n, int replicas) {
  std::vector<std::int64_t> bounds(static_cast<std::size_t>(replicas) + 1, 0);
  for (int q = 0; q < replicas; ++q)
    bounds[static_cast<std::size_t>(q) + 1] =
        bounds[static_cast<std::size_t>(q)] + n / replicas + (q < n % replicas ? 1 : 0);
  return bounds;
}

// The counts and displacements of the chunks `bounds` (R + 1 offsets), for MPI's v-collectives.
void chunk_counts(const std::vector<std::int64_t>& bounds, std::vector<int>& counts,
                  std::vector<int>& displs) {
  const std::size_t r = bounds.size() - 1;
  counts.resize(r);
  displs.resize(r);
  for (std::size_t q = 0; q < r; ++q) {
    counts[q] = to_int(bounds[q + 1] - bounds[q]);
    displs[q] = to_int(bounds[q]);
  }
}

// The module owning a parameter: its name without the last component ("fc1" of "fc1.weight").
std::string owner(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

template <class T>
GradientReducer<T>::GradientReducer(const nn::Module<T>& model, const Replicas& replicas,
                                    ReducerOptions options)
    : replicas_(&replicas), options_(options) {
  DISTOP_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0, kOp,
               "bucket capacities must be positive");
  DISTOP_CHECK(options.exchange_window >= 1, kOp, "the exchange window is at least 1 round, not ",
               options.exchange_window);
  using Exchange = ReducerOptions::Exchange;
  const bool pairwise =
      options.exchange == Exchange::pairwise ||
      (options.exchange == Exchange::automatic && replicas.count() - 1 > options.exchange_window);
  if (pairwise) exchange_ = comm::ExchangeSchedule::pairwise(options.exchange_window);
  int world_rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(replicas.world(), &world_rank), kOp);
  const int first = replicas.index() * replicas.model_ranks();
  buffers_ = model.named_buffers();
  named_ = model.named_parameters();
  DISTOP_MPI_CHECK(MPI_Comm_dup(replicas.reduction_comm(), &gather_comm_), kOp);
  for (auto& p : named_) {
    const bool reduce =
        p.reduction == nn::GradientReduction::per_replica ||
        within_replica(p.var.space().partition(), replicas.world(), first, replicas.model_ranks());
    const auto n = static_cast<std::size_t>(p.var.value().local_numel());
    params_.push_back(Param{p.name, p.var, reduce, n});
  }
  // The first layout: reverse registration order.
  std::vector<std::size_t> order(params_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = params_.size() - 1 - i;
  build(order);
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].var.set_ready_hook([this, i] { on_ready(i); });
}

template <class T>
GradientReducer<T>::~GradientReducer() {
  // Unchecked queries and waits: a destructor never throws (after MPI_Finalize, nothing to do).
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Phases still in flight complete before their buffers go (an abandoned request would leave MPI
  // or NCCL writing into freed memory).
  bool waited = false;
  for (auto& b : buckets_) {
    if (!b.request.active() || finalized) continue;
    try {
      b.request.wait();
      waited = true;
    } catch (...) {  // a destructor does not throw: the request is let go
    }
  }
  if constexpr (!kHostAccessible) {
    if (waited) Kokkos::fence();  // NCCL: its events, on the host
  }
  if (gather_comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&gather_comm_);
  for (auto& p : params_) {
    p.var.set_ready_hook({});
    p.var.unpin_grad();
  }
}

template <class T>
void GradientReducer<T>::build(const std::vector<std::size_t>& order) {
  // The gradients keep their values across a rebuild: copied out, then into the new buckets.
  std::vector<std::optional<Tensor<T>>> saved(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].var.has_grad()) saved[i] = params_[i].var.grad().local().clone();
  for (auto& p : params_) p.var.unpin_grad();
  buckets_.clear();
  bucket_of_.assign(params_.size(), 0);
  const std::size_t elt = sizeof(T);
  std::size_t bytes = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    bool open_new = buckets_.empty();
    if (!open_new) {
      const std::size_t cap =
          buckets_.size() == 1 ? options_.first_bucket_bytes : options_.bucket_bytes;
      if (options_.grouping == ReducerOptions::Grouping::layers)
        open_new = owner(params_[i].name) != owner(params_[buckets_.back().params.back()].name);
      else
        open_new = bytes > 0 && bytes + params_[i].elements * elt > cap;
    }
    if (open_new) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    bytes += params_[i].elements * elt;
  }
  // Each bucket's flat buffer, and its parameters' gradients as views of it (in bucket order).
  const int r = replicas_->count();
  spare_.clear();
  spare_bytes_ = 0;
  fixed_bytes_ = 0;
  for (auto& b : buckets_) {
    std::size_t total = 0;
    for (std::size_t i : b.params) total += params_[i].elements;
    b.bounds = chunk_bounds_of(static_cast<std::int64_t>(total), r);
    b.two_phase = r > 1 && total > 0;
    for (std::size_t i : b.params) b.two_phase = b.two_phase && params_[i].reduce;
    if (!sharded(b))
      b.buffer = Tensor<T>(Shape{static_cast<std::int64_t>(total)}, "distop::GradientReducer");
    if (b.two_phase) {
      chunk_counts(b.bounds, b.counts, b.displs);
      const int mine = b.counts[static_cast<std::size_t>(replicas_->index())];
      if (sharded(b)) {  // the owned chunk only; the rest from the rotating set in each pass
        b.shard = Tensor<T>(Shape{mine}, "distop::GradientReducer");
      } else {
        b.received = Tensor<T>::uninitialized(Shape{static_cast<std::int64_t>(mine) * r});
      }
      b.received_counts.assign(static_cast<std::size_t>(r), mine);
      b.received_displs.resize(static_cast<std::size_t>(r));
      for (int q = 0; q < r; ++q) b.received_displs[static_cast<std::size_t>(q)] = q * mine;
    }
    fixed_bytes_ +=
        static_cast<std::size_t>(b.buffer.numel() + b.received.numel() + b.shard.numel()) *
        sizeof(T);
    std::size_t offset = 0;
    for (std::size_t i : b.params) {
      b.offsets.push_back(offset);
      if (sharded(b)) {  // the gradient keeps storage of its own (unpinned above), if it has one
        if (!params_[i].var.has_grad()) params_[i].var.release_grad();
        offset += params_[i].elements;
        continue;
      }
      const Var<T>& v = params_[i].var;
      Tensor<T> view = b.buffer.slice(static_cast<std::int64_t>(offset), v.space().local_shape());
      const bool had = v.has_grad();
      v.pin_grad(DistTensor<T>::from_local(v.space(), std::move(view)));
      if (saved[i]) {
        v.grad().local().copy_from(*saved[i]);
      } else if (had) {
        v.zero_grad();
      }
      offset += params_[i].elements;
    }
  }
  ++layout_version_;
}

template <class T>
std::vector<typename GradientReducer<T>::Slot> GradientReducer<T>::bucket_slots(
    std::size_t bucket) const {
  const Bucket& b = buckets_.at(bucket);
  std::vector<Slot> slots;
  for (std::size_t k = 0; k < b.params.size(); ++k)
    slots.push_back(Slot{b.params[k], b.offsets[k], params_[b.params[k]].elements});
  return slots;
}

template <class T>
std::vector<typename GradientReducer<T>::BucketInfo> GradientReducer<T>::buckets() const {
  std::vector<BucketInfo> out;
  for (const auto& b : buckets_) {
    BucketInfo info;
    for (std::size_t i : b.params) {
      info.parameters.push_back(params_[i].name);
      info.bytes += params_[i].elements * sizeof(T);
    }
    out.push_back(std::move(info));
  }
  return out;
}

template <class T>
void GradientReducer<T>::broadcast_state() {
  const MPI_Comm comm = replicas_->reduction_comm();
  auto bcast = [&](const DistTensor<T>& t) {
    if (t.local_numel() == 0) return;
    comm::bcast(t.data(), t.local_numel(), 0, comm);
  };
  for (const auto& p : params_) bcast(p.var.value());
  for (const auto& b : buffers_) {
    if (b.count) {
      long long c = *b.count;
      DISTOP_MPI_CHECK(MPI_Bcast(&c, 1, MPI_LONG_LONG, 0, comm), kOp);
      *b.count = c;
    } else {
      bcast(b.tensor);
    }
  }
}

template <class T>
void GradientReducer<T>::set_shard_gradients(bool shard) {
  if (shard == shard_gradients_) return;
  for (const auto& b : buckets_)
    DISTOP_CHECK(!b.request.active(), kOp, "a reduction is unfinished");
  shard_gradients_ = shard;
  std::vector<std::size_t> order;  // the layout stays; its storage changes
  for (const auto& b : buckets_) order.insert(order.end(), b.params.begin(), b.params.end());
  build(order);
}

template <class T>
Tensor<T> GradientReducer<T>::owned_gradient(std::size_t bucket) const {
  const Bucket& b = buckets_.at(bucket);
  if (sharded(b)) return b.shard;
  const auto me = static_cast<std::size_t>(replicas_->index());
  const std::int64_t lo = b.bounds[me], n = b.bounds[me + 1] - lo;
  return b.buffer.slice(lo, Shape{n});
}

template <class T>
std::size_t GradientReducer<T>::gradient_bytes() const {
  std::size_t elements = spare_bytes_ / sizeof(T);
  for (const auto& b : buckets_)
    elements += static_cast<std::size_t>(b.buffer.numel() + b.received.numel() + b.shard.numel());
  for (const auto& p : params_)
    if (p.var.has_grad() && !p.var.grad_pinned())
      elements += static_cast<std::size_t>(p.var.grad().local_numel());
  return elements * sizeof(T);
}

template <class T>
Tensor<T> GradientReducer<T>::take_buffer(std::int64_t elements) {
  // The smallest free buffer of the set that holds `elements`, else a new one of that size.
  auto best = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it)
    if (it->numel() >= elements && (best == spare_.end() || it->numel() < best->numel())) best = it;
  if (best == spare_.end()) {
    spare_bytes_ += static_cast<std::size_t>(elements) * sizeof(T);
    return Tensor<T>::uninitialized(Shape{elements}, "distop::GradientReducer");
  }
  Tensor<T> t = std::move(*best);
  spare_.erase(best);
  return t;
}

template <class T>
void GradientReducer<T>::copy_out(Bucket& b, std::size_t k) {
  // Parameter k of sharded bucket b: its gradient (zeros without one) into the bucket's send
  // buffer, taken from the rotating set by the bucket's first, and the gradient freed.
  const std::size_t i = b.params[k];
  if (copied_[i]) return;
  if (b.send.numel() == 0) {
    b.send = take_buffer(b.bounds.back());
    note_bytes();
  }
  const Param& p = params_[i];
  const auto n = static_cast<std::int64_t>(p.elements);
  Tensor<T> to = b.send.slice(static_cast<std::int64_t>(b.offsets[k]), Shape{n});
  if (p.var.has_grad())
    to.copy_from(p.var.grad().local().reshaped(Shape{n}));
  else
    to.fill(T(0));
  p.var.release_grad();
  copied_[i] = true;
  if (counted_[i]) loose_bytes_ -= p.elements * sizeof(T);
  counted_[i] = false;
}

template <class T>
void GradientReducer<T>::note_bytes() {
  peak_bytes_ = std::max(peak_bytes_, fixed_bytes_ + loose_bytes_ + spare_bytes_);
}

template <class T>
void GradientReducer<T>::arm() {
  if (!pending_order_.empty()) {  // the rebuild deferred from the last pass (sharded)
    build(pending_order_);
    pending_order_.clear();
    rebuilt_ = true;
  }
  counted_.assign(params_.size(), false);
  copied_.assign(params_.size(), false);
  loose_bytes_ = 0;
  if (shard_gradients_)  // accumulated gradients (backward_no_sync) held outside the buckets
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (params_[i].var.has_grad() && !params_[i].var.grad_pinned()) {
        counted_[i] = true;
        loose_bytes_ += params_[i].elements * sizeof(T);
      }
  peak_bytes_ = 0;
  note_bytes();
  for (auto& b : buckets_) {
    DISTOP_CHECK(!b.request.active(), kOp, "a reduction of the previous pass is unfinished");
    b.pending = b.params.size();
    b.started = false;
    b.phase = 0;
  }
  next_to_start_ = 0;
  next_to_gather_ = 0;
  ready_order_.clear();
  overlapped_ = 0;
  nccl_ = comm::backend(kHostAccessible ? comm::Memory::kHost : comm::Memory::kDevice) ==
          comm::Backend::kNccl;
  armed_ = true;
}

template <class T>
void GradientReducer<T>::on_ready(std::size_t param) {
  if (!armed_) {
    // A tape cleared without a backward pass, or backward_no_sync: nothing to reduce. A replay by
    // a plain distop::backward would leave this replica's gradient unaveraged while the others
    // step with theirs: the replicas would drift apart, so that replay fails.
    if (!in_pass_ && Tape::replaying())
      Tape::fail_after_replay(Error(
          "backward", "parameter '" + params_[param].name +
                          "' belongs to a data-parallel model, whose gradients are averaged over "
                          "the replicas by DataParallel::backward; this backward pass does not "
                          "reduce them, so the replicas would drift apart. Call the "
                          "DataParallel's backward(tape, loss) (or backward_no_sync to "
                          "accumulate gradients over micro-batches)"));
    return;
  }
  ready_order_.push_back(param);
  Bucket& b = buckets_[bucket_of_[param]];
  if (sharded(b)) {  // into the bucket's send buffer now, and freed
    if (!counted_[param] && params_[param].var.has_grad()) {
      counted_[param] = true;
      loose_bytes_ += params_[param].elements * sizeof(T);
      note_bytes();
    }
    std::size_t k = 0;
    while (b.params[k] != param) ++k;
    copy_out(b, k);
  }
  if (b.pending > 0) --b.pending;
  if (options_.overlap) start_ready_buckets();
}

template <class T>
void GradientReducer<T>::start_ready_buckets() {
  // In bucket order only, so that every rank of a reduction group starts the same all-reduces in
  // the same order.
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].pending == 0) {
    start(next_to_start_);
    ++next_to_start_;
    ++overlapped_;
  }
}

template <class T>
void GradientReducer<T>::start(std::size_t bucket) {
  Bucket& b = buckets_[bucket];
  // A parameter that received no gradient in this pass contributes zeros (and gets the others').
  if (sharded(b)) {  // the gradients not copied yet (not ready, or every one without overlap)
    for (std::size_t k = 0; k < b.params.size(); ++k) copy_out(b, k);
    b.receive =
        take_buffer(static_cast<std::int64_t>(b.received_counts.at(0)) * replicas_->count());
    note_bytes();
  } else {
    for (std::size_t i : b.params) params_[i].var.grad();
  }
  b.started = true;
  if (trace::active()) {
    b.launched = std::chrono::steady_clock::now();
    b.traced = true;
  }
  // Buckets mix reduced and scaled-only parameters only if a tied parameter sits among per-replica
  // ones; those are reduced separately in finish().
  if (!b.two_phase) {
    b.phase = 4;
    return;
  }
  // Phase 1: chunk q of this replica's bucket to replica q; this replica's chunk of every replica
  // into `received`, in replica order.
  if (nccl_) {
    // NCCL's collectives on one communicator run in the order they are posted: both phases use the
    // reduction communicator, so every rank posts them in one order, the earlier buckets'
    // all-gathers (after waiting for their reduce-scatters) before this bucket's reduce-scatter.
    // NCCL progresses on the GPU by itself (and the waits do not block the host).
    gather_ready(true);
  }
  // The count arrays live in the bucket: MPI reads them until the operation completes.
  const bool own = sharded(b);
  b.request = comm::ialltoallv((own ? b.send : b.buffer).data(), b.counts.data(), b.displs.data(),
                               (own ? b.receive : b.received).data(), b.received_counts.data(),
                               b.received_displs.data(), replicas_->reduction_comm(), exchange_);
  b.phase = 1;
}

template <class T>
void GradientReducer<T>::gather_ready(bool block) {
  // Phase 2 in bucket order (every rank posts the same all-gathers in the same order on
  // gather_comm_): a bucket whose reduce-scatter has completed is summed in replica order, scaled
  // by 1/R, and its chunks all-gathered in place.
  const int r = replicas_->count();
  const auto me = static_cast<std::size_t>(replicas_->index());
  while (next_to_gather_ < next_to_start_) {
    Bucket& b = buckets_[next_to_gather_];
    if (b.phase == 1) {
      if (block) {
        b.request.wait();
      } else if (!b.request.test()) {
        return;
      }
      b.phase = 2;
    }
    if (b.phase == 2 && sharded(b)) {  // into the owned shard; the buffers go back to the set
      sum_in_order(b.receive, b.shard.numel(), r, static_cast<T>(1.0 / r), b.shard);
      spare_.push_back(std::move(b.send));
      spare_.push_back(std::move(b.receive));
      b.send = Tensor<T>();
      b.receive = Tensor<T>();
      b.phase = 3;
      trace_done(next_to_gather_);  // no all-gather follows
    }
    if (b.phase == 2) {
      const std::int64_t n = b.bounds[me + 1] - b.bounds[me];
      sum_in_order(b.received, n, r, static_cast<T>(1.0 / r),
                   b.buffer.slice(b.bounds[me], Shape{n}));
      if (gather_gradients_)
        b.request =
            comm::iallgatherv(b.buffer.data(), b.counts.data(), b.displs.data(),
                              nccl_ ? replicas_->reduction_comm() : gather_comm_, exchange_);
      else
        trace_done(next_to_gather_);
      b.phase = 3;
    }
    ++next_to_gather_;
  }
}

template <class T>
void GradientReducer<T>::progress() {
  if (!armed_ || nccl_) return;  // NCCL progresses on the GPU
  gather_ready(false);
  for (std::size_t k = next_to_gather_; k < next_to_start_; ++k) {
    Bucket& b = buckets_[k];
    if (b.phase == 1 && b.request.test()) b.phase = 2;
  }
  for (std::size_t k = 0; k < next_to_gather_; ++k)
    if (buckets_[k].request.test()) trace_done(k);
}

template <class T>
void GradientReducer<T>::trace_done(std::size_t bucket) {
  Bucket& b = buckets_[bucket];
  if (!b.traced) return;
  b.traced = false;
  const auto end = std::chrono::steady_clock::now();
  std::size_t bytes = 0;
  for (std::size_t i : b.params) bytes += params_[i].elements * sizeof(T);
  char buf[96];
  std::snprintf(buf, sizeof buf, "bucket %zu (%.1f MiB, %zu tensor%s)", bucket,
                static_cast<double>(bytes) / (1024.0 * 1024.0), b.params.size(),
                b.params.size() == 1 ? "" : "s");
  trace::record("bucket", buf, b.launched, end, 1);
}

template <class T>
void GradientReducer<T>::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  overlapped_ = next_to_start_;
  // Buckets whose gradients never became ready during the replay (or all, without overlap).
  for (; next_to_start_ < buckets_.size(); ++next_to_start_) start(next_to_start_);
  gather_ready(true);
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    buckets_[k].request.wait();
    buckets_[k].phase = 4;
    if (buckets_[k].two_phase) trace_done(k);
  }
  wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  armed_ = false;
  ++reductions_;
  spare_.clear();  // the rotating set is freed between passes
  spare_bytes_ = 0;
  const int r = replicas_->count();
  if (r > 1) {
    // Buckets that hold parameters not summed over the replicas (tied ones): their summed
    // parameters each on its own, gathered whole and added in replica order (the same operations
    // as in the two phases), and the explicit 1/R over the whole bucket.
    for (auto& b : buckets_) {
      if (b.two_phase || b.buffer.numel() == 0) continue;
      for (std::size_t i : b.params) {
        if (!params_[i].reduce || params_[i].elements == 0) continue;
        DistTensor<T>& g = params_[i].var.grad();
        const int n = to_int(g.local_numel());
        auto all = Tensor<T>::uninitialized(Shape{static_cast<std::int64_t>(n) * r});
        const std::vector<int> counts(static_cast<std::size_t>(r), n);
        std::vector<int> displs(static_cast<std::size_t>(r));
        for (int q = 0; q < r; ++q) displs[static_cast<std::size_t>(q)] = q * n;
        comm::allgatherv(g.data(), n, all.data(), counts.data(), displs.data(),
                         replicas_->reduction_comm());
        sum_in_order(all, n, r, T(1), g.local().reshaped(Shape{n}));
      }
      kernels::scale(static_cast<T>(1.0 / r), b.buffer);
    }
  }
  for (std::size_t k = 0; k < buckets_.size(); ++k) trace_done(k);  // those reduced just above
  // After the first pass, the buckets follow the order in which gradients became ready (rank 0 of
  // each reduction group decides, so the group's layouts match).
  if (!rebuilt_ && options_.grouping == ReducerOptions::Grouping::buckets) {
    std::vector<std::size_t> order = ready_order_;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    std::vector<long long> wire(order.begin(), order.end());
    DISTOP_MPI_CHECK(MPI_Bcast(wire.data(), static_cast<int>(wire.size()), MPI_LONG_LONG, 0,
                               replicas_->reduction_comm()),
                     kOp);
    order.assign(wire.begin(), wire.end());
    if (shard_gradients_) {  // the owned gradients stay in their layout until the next pass
      pending_order_ = std::move(order);
    } else {
      build(order);
      rebuilt_ = true;
    }
  }
}

namespace {

// Replays `tape` from `loss` with every component seeded `seed`.
template <class T>
void seeded_backward(Tape& tape, Var<T>& loss, T seed) {
  if (seed == T(1)) {
    distop::backward(tape, loss);
    return;
  }
  DistTensor<T> g(loss.space());
  g.local().fill(seed);
  distop::backward(tape, loss, g);
}

// Marks a backward pass of the reducer for as long as it lives.
class Pass {
 public:
  explicit Pass(bool& flag) noexcept : flag_(flag) { flag_ = true; }
  ~Pass() { flag_ = false; }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

 private:
  bool& flag_;
};

}  // namespace

template <class T>
void GradientReducer<T>::backward(Tape& tape, Var<T>& loss, T seed) {
  const Pass pass(in_pass_);
  arm();
  tape.set_progress_hook([this] { progress(); });
  try {
    seeded_backward(tape, loss, seed);
  } catch (...) {
    tape.set_progress_hook({});
    armed_ = false;
    throw;
  }
  tape.set_progress_hook({});
  finish();
}

template <class T>
void GradientReducer<T>::backward_no_sync(Tape& tape, Var<T>& loss, T seed) {
  const Pass pass(in_pass_);
  armed_ = false;
  seeded_backward(tape, loss, seed);
}

template class GradientReducer<float>;
template class GradientReducer<double>;

}  // namespace distop::parallel
