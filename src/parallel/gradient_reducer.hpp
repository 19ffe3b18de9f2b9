#pragma once
// GradientReducer: data-parallel training's gradient averaging over the replicas of a model, in
// flat buckets reduced while the backward pass still computes (PyTorch DDP's reducer). Internal:
// programs use parallel::DataParallel (distop/parallel/data_parallel.hpp).

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/nn/module.hpp"
#include "distop/parallel/data_parallel.hpp"
#include "distop/parallel/replicas.hpp"

namespace distop::parallel {

// Internal to the parallel layer: the reducer behind parallel::DataParallel (its public face) and
// parallel::ShardedOptimizer, which reads the bucket layout.
using ReducerOptions = DataParallelOptions;

// Averages the gradients of a model's parameters over the replicas of `replicas` after each
// backward pass, so that every replica steps with the gradient of the mean loss over the global
// batch: for a parameter p with replica gradients g_1..g_R (each the gradient of that replica's
// mean loss), every replica ends with (g_1 + ... + g_R) / R. The sum runs over
// replicas.reduction_comm() (the ranks holding the same shard of p) in a fixed order (below); the
// 1/R is an explicit step after it. Parameters whose gradient is already reduced over ranks of
// other replicas (a `tied` parameter whose partition spans replicas, such as a batch norm
// synchronised over the whole data-parallel group) are only scaled. This is the adjoint of
// broadcasting the parameters to the replicas (docs/adjoints.md): Broadcast* = SumReduce, and the
// 1/R averages the R losses.
//
// Buckets. The gradients live in flat buffers, one per bucket, as views (Var::pin_grad): there is
// no copy into or out of a bucket. Buckets are filled in reverse registration order (the order in
// which backward produces gradients), capped by ReducerOptions. After the first backward pass the
// buckets are rebuilt in the order in which the gradients actually became ready (rank 0 of each
// reduction group decides, so that the group's buckets match).
//
// Fixed reduction order. Each bucket's sum is computed in two phases, as a reduce-scatter and an
// all-gather: the bucket is cut into R balanced chunks (chunk q: entries [q N / R, (q + 1) N / R)
// as distop::balanced_bounds splits N, empty chunks allowed), chunk q of every replica goes to
// replica q (comm::ialltoallv), which adds them in replica order, g_0 + g_1 + ... + g_{R-1}, entry
// by entry, multiplies by 1/R, and the scaled chunks are all-gathered (comm::iallgatherv). Each
// entry's result is thus the same sequence of floating-point operations whatever the bucket it lies
// in, the chunk it falls into, the grouping, the overlap and the replica count's MPI algorithms:
// every bucketing of a run gives the same bits, at any number of replicas. (An MPI all-reduce would
// not: MPICH picks its summation tree by message size and rank count.) distop's ReduceScatter
// operator is not used for the first phase: it is blocking, and it adds each chunk's owner's copy
// first, so a sum's order would depend on which replica owns the entry, that is on the bucketing.
// The reduction keeps a receive buffer of each bucket's size (R chunks of N / R entries), or, with
// set_shard_gradients (ZeRO stage 2), takes it from a rotating set only while the bucket is in
// flight.
//
// Overlap. Each parameter's gradient is ready when the last tape entry that uses it has run
// (Var::Use). A bucket's reduce-scatter starts as soon as all its gradients are ready and every
// earlier bucket's has started (so every rank starts the same collectives in the same order);
// between tape entries the replay tests the outstanding phases (comm::Request::test, MPI_Test),
// which is what advances MPICH's nonblocking collectives, and a bucket whose reduce-scatter has
// completed is summed and its all-gather started (in bucket order, on a communicator of its own).
// After the replay, backward() waits for the rest. Every transfer of tensor data goes through the
// communication call surface (comm/collectives.hpp), which picks the backend by where the buckets
// live: device buckets take NCCL in NCCL builds (grouped ncclSend/ncclRecv on the reduction
// communicator, completed through CUDA events): the same sums in the same order, NCCL progressing
// on the GPU; each bucket's all-gather is posted just before the next bucket's reduce-scatter
// (after waiting for its own), so that every rank posts them in one order on the one NCCL
// communicator. Without NCCL they take the staging backend (or a CUDA-aware MPI). (The device paths
// are untested on a GPU here.)
//
// Collective over replicas.world() at construction (every rank passes its replica of the same
// model). Refers to the model and replicas, which must outlive it; the model's parameters must
// not change while it lives (it pins their gradients and sets their ready hooks, and undoes both
// when destroyed). Not copyable.
template <class T>
class GradientReducer {
 public:
  GradientReducer(const nn::Module<T>& model, const Replicas& replicas,
                  ReducerOptions options = {});
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;
  ~GradientReducer();

  // Parameters and buffers start equal on every replica: each rank's boxes are overwritten with
  // replica 0's (comm::bcast over the reduction communicator). Collective.
  void broadcast_state();

  // The replay of `tape` from `loss` seeded with `seed` on each of its components, then the
  // averaged gradients: the replay starts reductions as gradients become ready and drives them;
  // when it returns every gradient is the replicas' mean.
  void backward(Tape& tape, Var<T>& loss, T seed = T(1));
  // For gradient accumulation over micro-batches: backward without reduction. The gradients add
  // up locally; the micro-batch that ends the accumulation calls backward(), which reduces the
  // sums. (Scale the micro-batches' losses so that their sum is the step's mean.)
  void backward_no_sync(Tape& tape, Var<T>& loss, T seed = T(1));

  // The bucket layout now in use: for each bucket, the names of its parameters in the bucket's
  // order, and its bytes on this rank.
  struct BucketInfo {
    std::vector<std::string> parameters;
    std::size_t bytes = 0;
  };
  std::vector<BucketInfo> buckets() const;
  // Whether the buckets have been rebuilt from an observed ready order.
  bool rebuilt() const noexcept { return rebuilt_; }

  // The layout of the buckets, for sharding optimizer state over the replicas
  // (parallel::ShardedOptimizer). Parameters are numbered as model.named_parameters() lists them.
  struct Slot {
    std::size_t parameter;  // index into parameters()
    std::size_t offset;     // of its first entry in the bucket's buffer
    std::size_t elements;   // this rank's box of it
  };
  std::size_t bucket_count() const noexcept { return buckets_.size(); }
  std::vector<Slot> bucket_slots(std::size_t bucket) const;
  // The bucket's flat buffer (shares its storage: the parameters' gradients are views of it);
  // empty for a bucket that keeps only its owned chunk (bucket_sharded).
  const Tensor<T>& bucket_buffer(std::size_t bucket) const { return buckets_.at(bucket).buffer; }
  // Chunk q of the bucket, the entries [bounds[q], bounds[q + 1]) that replica q sums: R + 1
  // offsets from 0 to the bucket's size.
  const std::vector<std::int64_t>& chunk_bounds(std::size_t bucket) const {
    return buckets_.at(bucket).bounds;
  }
  const Replicas& replicas() const noexcept { return *replicas_; }
  // Every parameter, in named_parameters() order.
  const std::vector<nn::NamedParameter<T>>& parameters() const noexcept { return named_; }
  // Counts the layouts: changes whenever the buckets are rebuilt.
  std::uint64_t layout_version() const noexcept { return layout_version_; }
  // Whether the reduced chunks are all-gathered (true, the default). With false, after backward()
  // only this replica's chunk of each bucket (chunk_bounds(b)[index], ...) holds the mean; the
  // rest of the bucket keeps this replica's own gradient, which is not the mean (sharded optimizer
  // state, ZeRO stage 2, which needs only its chunk). Buckets of parameters that are not summed
  // over the replicas (tied ones) are whole either way.
  void set_gather_gradients(bool gather) noexcept { gather_gradients_ = gather; }
  bool gather_gradients() const noexcept { return gather_gradients_; }

  // ZeRO stage 2's gradient memory (ShardedOptimizer stage 2 turns it on). With true, the buckets
  // summed over the replicas keep no whole buffer: each holds only this replica's chunk of the
  // mean (owned_gradient), about 1/R of the gradients' bytes. Backward writes the parameters'
  // gradients into storage of their own. As soon as a gradient is ready it is copied into its
  // bucket's send buffer (taken at the bucket's first ready gradient) and freed; when the bucket's
  // last one is, a receive buffer is taken and the reduce-scatter starts; when that completes the
  // chunk is summed into the owned shard and both buffers go back for the next buckets. The
  // buffers come from a small rotating set: a bucket takes the smallest free buffer that holds
  // it, the set grows only while none does, and it is freed when backward() returns. So during
  // backward the gradient memory is the owned shards, the gradients not yet ready and the buffers
  // of the buckets filling or in flight; after it, the owned shards alone, and the parameters have
  // no gradient (Var::has_grad is false). The sums are the same operations, so the same bits, as
  // with whole buckets. Gradient accumulation: backward_no_sync() keeps every parameter's whole
  // gradient (summed locally, as torch FSDP's no_sync), and the backward() that ends the
  // accumulation reduces the sums. Every backward() replaces the owned gradients (they do not
  // add up across reduced passes). The first layout's rebuild from the observed ready order is
  // made at the start of the next backward() (the owned gradients stay in the layout they were
  // reduced in until then). Buckets holding parameters not summed over the replicas (tied ones)
  // stay whole. Not collective; call it between passes.
  void set_shard_gradients(bool shard);
  bool shard_gradients() const noexcept { return shard_gradients_; }
  // Whether bucket b keeps only this replica's chunk of its gradient (set_shard_gradients).
  bool bucket_sharded(std::size_t bucket) const {
    return shard_gradients_ && buckets_.at(bucket).two_phase;
  }
  // This replica's chunk of bucket b's gradient, entries [chunk_bounds(b)[index], ...[index + 1])
  // of the bucket's flat layout, shared storage: after backward() it holds the mean. A view of
  // the bucket buffer, or the owned shard of a sharded bucket.
  Tensor<T> owned_gradient(std::size_t bucket) const;
  // The number of backward() passes that completed their reduction.
  std::uint64_t reductions() const noexcept { return reductions_; }
  // Bytes of gradient storage this rank holds now, counted from the tensors: bucket buffers,
  // receive buffers, owned shards, rotating buffers, and the parameters' gradients kept outside
  // buckets.
  std::size_t gradient_bytes() const;
  // The largest gradient_bytes() seen during the last backward(), sampled at each gradient that
  // became ready and each bucket's reduction events (a gradient still receiving contributions
  // counts from when it is ready).
  std::size_t peak_gradient_bytes() const noexcept { return peak_bytes_; }

  // What the last backward() did: seconds spent waiting for reductions after the replay, and the
  // number of buckets started during the replay (the rest started after it).
  double last_wait_seconds() const noexcept { return wait_seconds_; }
  std::size_t last_overlapped_buckets() const noexcept { return overlapped_; }

 private:
  struct Param {
    std::string name;
    Var<T> var;
    bool reduce;  // summed over the reduction group (else only scaled)
    std::size_t elements;
  };
  struct Bucket {
    std::vector<std::size_t> params;   // indices into params_
    std::vector<std::size_t> offsets;  // of each parameter's first entry in buffer
    Tensor<T> buffer;
    std::vector<std::int64_t> bounds;  // the replicas' chunks: R + 1 offsets
    std::vector<int> counts, displs;   // the chunks, for MPI (held while a phase runs)
    Tensor<T> received;                // phase 1: this rank's chunk of every replica, in order
    std::vector<int> received_counts, received_displs;
    bool two_phase = false;   // summed over the replicas by reduce-scatter + all-gather
    std::size_t pending = 0;  // parameters not yet ready in this pass
    comm::Request request;    // the phase in flight (comm::ialltoallv, comm::iallgatherv)
    // 0 idle, 1 reduce-scatter posted, 2 reduce-scatter complete, 3 all-gather posted (or none
    // needed), 4 done.
    int phase = 0;
    bool started = false;
    // Sharded (set_shard_gradients): the owned chunk's mean, and the rotating buffers this bucket
    // holds while its reduce-scatter runs.
    Tensor<T> shard, send, receive;
    // Tracing (core/trace.hpp): when this pass's reduction was launched, while its event is open.
    std::chrono::steady_clock::time_point launched;
    bool traced = false;
  };

  void build(const std::vector<std::size_t>& order);
  void arm();
  void on_ready(std::size_t param);
  void start_ready_buckets();
  void start(std::size_t bucket);
  void progress();
  void gather_ready(bool block);
  void finish();
  // Records bucket `bucket`'s reduction on the trace (row 1) if it is open there, ending now.
  void trace_done(std::size_t bucket);
  bool sharded(const Bucket& b) const noexcept { return shard_gradients_ && b.two_phase; }
  Tensor<T> take_buffer(std::int64_t elements);
  void copy_out(Bucket& b, std::size_t k);
  void note_bytes();

  const Replicas* replicas_;
  ReducerOptions options_;
  comm::ExchangeSchedule exchange_;  // from options_.exchange and the replica count
  std::vector<Param> params_;
  std::vector<nn::NamedBuffer<T>> buffers_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<std::size_t> ready_order_;
  std::size_t next_to_start_ = 0;
  std::size_t next_to_gather_ = 0;
  MPI_Comm gather_comm_ = MPI_COMM_NULL;  // a duplicate of the reduction communicator
  std::vector<nn::NamedParameter<T>> named_;
  std::uint64_t layout_version_ = 0;
  bool gather_gradients_ = true;
  bool shard_gradients_ = false;
  std::vector<std::size_t> pending_order_;  // a rebuild deferred to the next pass (sharded)
  std::vector<Tensor<T>> spare_;            // the rotating set's free buffers
  std::size_t spare_bytes_ = 0;             // buffers of the set, free or held by a bucket
  std::vector<bool> counted_;               // per parameter: its gradient counted as held
  std::vector<bool> copied_;                // per parameter: copied into its send buffer
  std::size_t loose_bytes_ = 0;             // gradients held outside buckets, counted
  std::size_t fixed_bytes_ = 0;             // bucket, receive and owned shard buffers
  std::uint64_t reductions_ = 0;
  std::size_t peak_bytes_ = 0;
  bool armed_ = false;
  bool in_pass_ = false;  // inside backward() or backward_no_sync()
  bool nccl_ = false;     // this pass's buckets go through the nccl backend
  bool rebuilt_ = false;
  double wait_seconds_ = 0;
  std::size_t overlapped_ = 0;
};

extern template class GradientReducer<float>;
extern template class GradientReducer<double>;

namespace detail {
// The reducer of a DataParallel, for distop's own tests and benchmarks of the bucket layout.
template <class T>
GradientReducer<T>& reducer_of(DataParallel<T>& data_parallel);
}  // namespace detail

}  // namespace distop::parallel
