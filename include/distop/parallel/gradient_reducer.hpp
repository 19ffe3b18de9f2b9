#pragma once
// GradientReducer: data-parallel training's gradient averaging over the replicas of a model, in
// flat buckets reduced while the backward pass still computes (PyTorch DDP's reducer).

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/module.hpp"
#include "distop/parallel/replicas.hpp"

namespace distop::parallel {

struct ReducerOptions {
  // Bucket capacities in bytes of this rank's gradient boxes: the first bucket (the last
  // parameters of the model, whose gradients are ready first) is kept small so that reduction
  // starts early; the others are larger, so that each all-reduce moves enough bytes to run at
  // bandwidth.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  std::size_t bucket_bytes = std::size_t{25} << 20;
  // How parameters are grouped into reductions: size-capped buckets, or one group per module
  // that owns parameters (Laanait et al.'s grouping of the tensors of each layer, in backward
  // order).
  enum class Grouping { buckets, layers };
  Grouping grouping = Grouping::buckets;
  // Start each bucket's all-reduce as soon as its last gradient is ready during backward (true),
  // or reduce everything after backward (false, for comparison).
  bool overlap = true;
};

// Averages the gradients of a model's parameters over the replicas of `replicas` after each
// backward pass, so that every replica steps with the gradient of the mean loss over the global
// batch: for a parameter p with replica gradients g_1..g_R (each the gradient of that replica's
// mean loss), every replica ends with (g_1 + ... + g_R) / R. The sum is an all-reduce over
// replicas.reduction_comm() (the ranks holding the same shard of p); the 1/R is an explicit step
// after it. Parameters whose gradient is already reduced over ranks of other replicas (a `tied`
// parameter whose partition spans replicas, such as a batch norm synchronised over the whole
// data-parallel group) are only scaled. This is the adjoint of broadcasting the parameters to the
// replicas (docs/adjoints.md): Broadcast* = SumReduce, and the 1/R averages the R losses.
//
// Buckets. The gradients live in flat buffers, one per bucket, as views (Var::pin_grad): there is
// no copy into or out of a bucket. Buckets are filled in reverse registration order (the order in
// which backward produces gradients), capped by ReducerOptions. After the first backward pass the
// buckets are rebuilt in the order in which the gradients actually became ready (rank 0 of each
// reduction group decides, so that the group's buckets match).
//
// Overlap. Each parameter's gradient is ready when the last tape entry that uses it has run
// (Var::Use). A bucket's nonblocking all-reduce (MPI_Iallreduce) starts as soon as all its
// gradients are ready and every earlier bucket has started (so every rank starts the same
// reductions in the same order); between tape entries the replay calls MPI_Testall, which is what
// advances MPICH's nonblocking collectives. After the replay, backward() waits for the rest.
//
// Results do not depend on the bucketing whenever MPI's reduction order does not depend on the
// message size: always at 2 replicas (a + b is b + a exactly); at more, when MPI's all-reduce
// algorithm is pinned (MPICH: MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM).
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
  // replica 0's (MPI_Bcast over the reduction communicator). Collective.
  void broadcast_state();

  // backward(tape, loss), then the averaged gradients: the replay starts reductions as gradients
  // become ready and drives them; when it returns every gradient is the replicas' mean.
  void backward(Tape& tape, Var<T>& loss);
  // For gradient accumulation over micro-batches: backward without reduction. The gradients add
  // up locally; the micro-batch that ends the accumulation calls backward(), which reduces the
  // sums. (Scale the micro-batches' losses so that their sum is the step's mean.)
  void backward_no_sync(Tape& tape, Var<T>& loss);

  // The bucket layout now in use: for each bucket, the names of its parameters in the bucket's
  // order, and its bytes on this rank.
  struct BucketInfo {
    std::vector<std::string> parameters;
    std::size_t bytes = 0;
  };
  std::vector<BucketInfo> buckets() const;
  // Whether the buckets have been rebuilt from an observed ready order.
  bool rebuilt() const noexcept { return rebuilt_; }

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
    std::vector<std::size_t> params;  // indices into params_
    Tensor<T> buffer;
    std::size_t pending = 0;  // parameters not yet ready in this pass
    MPI_Request request = MPI_REQUEST_NULL;
    bool started = false;
  };

  void build(const std::vector<std::size_t>& order);
  void arm();
  void on_ready(std::size_t param);
  void start_ready_buckets();
  void start(std::size_t bucket);
  void progress();
  void finish();

  const Replicas* replicas_;
  ReducerOptions options_;
  std::vector<Param> params_;
  std::vector<nn::NamedBuffer<T>> buffers_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<std::size_t> ready_order_;
  std::size_t next_to_start_ = 0;
  bool armed_ = false;
  bool rebuilt_ = false;
  double wait_seconds_ = 0;
  std::size_t overlapped_ = 0;
};

extern template class GradientReducer<float>;
extern template class GradientReducer<double>;

}  // namespace distop::parallel
