#pragma once
// DataParallel: a model trained as R replicas on R shares of every batch, its gradients averaged
// over the replicas during the backward pass (what torch.nn.parallel.DistributedDataParallel is to
// PyTorch).

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

template <class T>
class GradientReducer;
template <class T>
class ShardedOptimizer;
template <class T>
class DataParallel;
namespace detail {
template <class T>
GradientReducer<T>& reducer_of(DataParallel<T>& data_parallel);
}  // namespace detail

struct DataParallelOptions {
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
  // Start each bucket's reduction as soon as its last gradient is ready during backward (true),
  // or reduce everything after backward (false, for comparison).
  bool overlap = true;
  // How each bucket's two phases move their chunks over the R replicas (comm::ExchangeSchedule):
  // MPI's nonblocking collectives (collective, the default: MPICH throttles its own all-to-all),
  // pairwise point-to-point rounds with at most exchange_window rounds in flight (pairwise), or
  // automatic: pairwise where R - 1 exceeds exchange_window, the collectives otherwise (for an MPI
  // that posts every message of a nonblocking collective at once, such as SimGrid's SMPI;
  // docs/data_parallel.md). The sums are the same bits with either. NCCL buckets take NCCL's
  // grouped calls whatever this says.
  enum class Exchange { automatic, collective, pairwise };
  Exchange exchange = Exchange::collective;
  int exchange_window = 32;  // at least 1 (distop::Error at construction otherwise)
};

// R replicas of `module`, one on each replica's ranks (Replicas: each replica builds its module on
// replicas.model_comm()), trained on R shares of every batch.
//
// Construction (collective over replicas.world()): every rank passes its replica of the same
// model (the same parameter names and shapes: an Error on every rank otherwise); each rank's
// parameters and buffers are overwritten with replica 0's, so the replicas start equal; the
// parameters' gradients move into the reducer's buckets.
//
// backward(tape, loss) replays the tape from the loss and averages the gradients over the
// replicas while the replay computes: afterwards every replica holds the gradient of the mean
// over the replicas of their losses, and an optimizer stepping each replica keeps them equal. The
// loss is in distop's loss convention (docs/losses.md: its components over the ranks of its
// partition sum to it). A loss computed by one replica from its share is averaged with the
// others'; a loss whose partition spans k replicas (a contrastive loss over the global batch,
// loss::ntxent over replicas.world(): k = R) is one loss of those replicas, and counts once:
// backward seeds it with k, so that the gradient is that of the mean over the distinct losses
// (with k = R, of the loss itself). Every group of replicas sharing a loss must span the same
// number of replicas, dividing R (an Error on every rank otherwise; the ranks agree on it at every
// backward, with one small all-reduce).
//
// Plain distop::backward(tape, loss) on a tape of this model's parameters is an Error after the
// replay, naming the first parameter it reached: it would leave each replica with its own
// gradient, and the replicas would drift apart.
//
// How: the sum runs over replicas.reduction_comm() (the ranks holding the same shard of each
// parameter) in a fixed order, in flat buckets (reverse registration order at first, rebuilt from
// the order in which the gradients became ready after the first backward); each bucket's sum is a
// reduce-scatter and an all-gather started as soon as its last gradient is ready, so every
// bucketing, overlap and replica count gives the same bits (docs/data_parallel.md). Parameters
// whose gradient is already reduced over ranks of several replicas (nn::GradientReduction::tied)
// are only scaled by 1/R.
//
// The module and replicas must outlive the DataParallel; the module's parameters must not change
// while it lives. Not copyable or movable (the parameters' hooks refer to it).
template <class T>
class DataParallel {
 public:
  DataParallel(nn::Module<T>& module, const Replicas& replicas, DataParallelOptions options = {});
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  ~DataParallel();

  nn::Module<T>& module() const noexcept { return *module_; }
  const Replicas& replicas() const noexcept { return *replicas_; }

  // Replays `tape` from `loss` and averages the gradients over the replicas (see above).
  // Collective over replicas.world(): every rank calls it for its replica's loss.
  void backward(Tape& tape, Var<T>& loss);
  // Gradient accumulation over micro-batches (torch's no_sync): the replay without reduction, the
  // gradients adding up locally; the micro-batch that ends the accumulation calls backward(),
  // which reduces the sums. Scale the micro-batches' losses so that their sum is the step's.
  void backward_no_sync(Tape& tape, Var<T>& loss);
  // Overwrites every replica's parameters and buffers with replica 0's (as at construction), for
  // a program that changed one replica's state. Collective over replicas.world().
  void broadcast_state();

  // The buckets now in use: each one's parameters, in its order, and its bytes on this rank.
  struct BucketInfo {
    std::vector<std::string> parameters;
    std::size_t bytes = 0;
  };
  std::vector<BucketInfo> buckets() const;
  // Whether the buckets have been rebuilt from an observed ready order (after the first backward).
  bool buckets_rebuilt() const noexcept;
  // What the last backward() did: the seconds it waited for reductions after the replay, and the
  // buckets whose reduction started during the replay (the others started after it).
  double last_wait_seconds() const noexcept;
  std::size_t last_overlapped_buckets() const noexcept;
  // Bytes of gradient storage this rank holds now, and the most it held during the last
  // backward().
  std::size_t gradient_bytes() const;
  std::size_t peak_gradient_bytes() const noexcept;
  // The number of replicas each loss spans (see above), as the last backward() agreed; 0 before.
  int loss_replicas() const noexcept { return loss_replicas_; }

 private:
  friend class ShardedOptimizer<T>;
  friend GradientReducer<T>& detail::reducer_of<T>(DataParallel<T>&);
  // The seed of a loss of space `space` (see above).
  T seed_of(const TensorSpace& space);

  nn::Module<T>* module_;
  const Replicas* replicas_;
  std::unique_ptr<GradientReducer<T>> reducer_;
  int loss_replicas_ = 0;  // k, as the last backward agreed; 0 before the first
};

extern template class DataParallel<float>;
extern template class DataParallel<double>;

}  // namespace distop::parallel
