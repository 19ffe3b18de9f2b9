#pragma once
// ShardedOptimizer: optimizer state sharded over the replicas of a data-parallel model (ZeRO
// stages 1 and 2, Rajbhandari et al. 2020).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distop/ops/all_gather.hpp"
#include "distop/optim/optimizer.hpp"
#include "distop/parallel/data_parallel.hpp"

namespace distop::parallel {

// Wraps any optimizer of the optim family so that each of the R replicas of a DataParallel model
// keeps and updates only its own 1/R of the state. The DataParallel's gradients live in flat
// buckets, each cut into R chunks; replica q owns chunk q of every bucket: the wrapped optimizer is
// made by `make` over one shard Var per parameter piece that replica q owns, a flat view of that
// piece of the parameter's box (updates land in the model's parameters in place) whose gradient is
// the view of the same piece of the bucket's averaged gradient. Its state tensors therefore take
// 1/R of the unsharded optimizer's memory (to within a bucket's rounding).
//
// step(): the wrapped optimizer's step on the owned pieces, then every bucket's parameters are
// all-gathered over the replicas, through distop's AllGather operator on the bucket's flat layout
// (a 1-D tensor split over the reduction communicator as the chunks are; a bucket with fewer
// entries than replicas has empty chunks, which an operator's partition cannot hold, and is
// gathered by comm::allgatherv). The gradients come from the DataParallel's reduce-scatter:
//   stage 1: the averaged gradients are all-gathered too (every replica keeps the whole mean
//            gradient, for clipping or inspection); only the optimizer state is sharded.
//   stage 2: each bucket keeps only the owned chunk of its averaged gradient: no gradient
//            all-gather, about 1/R of the gradients' bytes between steps, and during backward only
//            the buckets in flight in full. After backward the model's parameters have no
//            gradient; step() uses the owned gradients of the last DataParallel::backward() it has
//            not stepped with yet (each reduced pass gives one step, as DeepSpeed's engine step; a
//            step without a new pass updates nothing, as an unsharded optimizer after
//            zero_grad()). Gradient accumulation: backward_no_sync() keeps whole local gradients
//            until the backward() that ends the accumulation, so the result is unsharded
//            training's.
// Every optimizer of the family updates entry by entry, and the reduction's sum does not depend
// on the layout, so the parameters equal unsharded training's (the same bits where the update's
// floating-point operations do not depend on the tensor's length).
//
// Parameter groups. The second constructor takes the optimizer's groups of model parameters (any
// of the model's parameters, each at most once; those in no group are not updated) and `make`
// receives the owned pieces group by group, to build the wrapped optimizer with one group per
// group, in order, each with its own options (lr, weight decay, ...): every piece steps with its
// parameter's group's options. Buckets are not split by group (a bucket, and a chunk, may hold
// pieces of several groups): the update is entry by entry, so a piece's group is all it needs.
// The first constructor is one group of every parameter, in named_parameters() order.
//
// After the DataParallel rebuilds its buckets (after the first backward pass) the ownership
// changes: the next step() first moves the state to the new layout (gathered unsharded, then
// sliced), a collective over the replicas like step() itself.
//
// State. state_dict() is in the unsharded layout (one entry per optimized parameter in the
// groups' order, tensors of the parameter's local box shape: the unsharded optimizer's
// state_dict over the same groups), so that checkpoints are those of unsharded training and load
// with any replica count or stage, resharding. state_dict() gathers the shards: collective over
// the replicas (every rank calls it, as io::save_checkpoint does); load_state_dict() is local
// (each replica slices its pieces from the whole state).
//
// Collective over the replicas at construction, in step() and in state_dict(). The DataParallel,
// its model and replicas must outlive every call, and the parameters' storage must stay where it
// is (loading and broadcasting write into it in place).
template <class T>
class ShardedOptimizer final : public optim::Optimizer<T> {
 public:
  // Makes the wrapped optimizer over shard Vars (possibly none, on a replica that owns no entry).
  using Factory = std::function<std::unique_ptr<optim::Optimizer<T>>(std::vector<Var<T>> shards)>;
  // Makes it over the shard Vars of each group (possibly none in a group), with one parameter
  // group per group, in order.
  using GroupFactory = std::function<std::unique_ptr<optim::Optimizer<T>>(
      std::vector<std::vector<Var<T>>> shard_groups)>;

  // `stage` is 1 or 2 (else distop::Error). Sets the DataParallel's gradient gathering and
  // storage for the stage, which stay so after this optimizer is gone (its destructor does not
  // touch the DataParallel, which may be destroyed first). One group of every parameter.
  ShardedOptimizer(DataParallel<T>& data_parallel, int stage, Factory make);
  // Groups of the model's parameters (distop::Error for a Var that is not one of them, or one in
  // two groups; the wrapped optimizer must have groups.size() groups).
  ShardedOptimizer(DataParallel<T>& data_parallel, int stage,
                   std::vector<std::vector<Var<T>>> groups, GroupFactory make);

  std::string name() const override { return inner_->name(); }
  void step() override;
  int stage() const noexcept { return stage_; }

  optim::Hyperparameters group_options(std::size_t g) const override;
  optim::StateKeys state_keys(std::size_t g) const override;
  // The unsharded state, gathered from the replicas' shards. Collective over the replicas.
  optim::OptimizerState<T> state_dict() const override;
  // The checks of the wrapped optimizer, on the unsharded state: one entry per model parameter,
  // tensors of the parameter's local box shape. Local.
  void check_state_dict(const optim::OptimizerState<T>& state) const override;
  // Takes this replica's pieces of an unsharded state (any replica count's). Local.
  void load_state_dict(const optim::OptimizerState<T>& state) override;

  // Bytes of the state tensors this rank holds (the wrapped optimizer's).
  std::size_t state_bytes() const;
  // The wrapped optimizer over this replica's pieces.
  const optim::Optimizer<T>& shard_optimizer() const noexcept { return *inner_; }

 protected:
  double group_lr(std::size_t g) const override;
  void set_group_lr(std::size_t g, double lr) override;

 private:
  struct Place {  // where a parameter sits, in the layout the pieces were made from
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // in the bucket
    std::int64_t elements = 0;
    std::vector<std::int64_t> bounds;  // its bucket's chunks
    std::int64_t piece = -1;           // index of this replica's piece among the shards, or -1
  };
  struct Piece {
    std::size_t parameter;  // model parameter
    std::size_t index;      // optimized parameter (the groups in order)
    std::int64_t start;     // in the parameter's flat box
    std::int64_t count;
  };
  // Replica q's part of parameter i: [first, first + count) of its flat box.
  std::pair<std::int64_t, std::int64_t> part(const Place& p, int q) const;
  void make_pieces();
  optim::OptimizerState<T> assemble() const;
  optim::OptimizerState<T> sliced(const optim::OptimizerState<T>& state) const;
  void gather_parameters();

  GradientReducer<T>* reducer_;
  int stage_;
  GroupFactory make_;
  std::vector<std::vector<std::size_t>> groups_;  // model parameter indices per group
  std::vector<std::size_t> order_;                // of each optimized parameter (groups in order)
  std::uint64_t stepped_ = 0;                     // reductions at the last step
  std::unique_ptr<optim::Optimizer<T>> inner_;
  std::vector<Place> places_;  // per model parameter
  std::vector<Piece> pieces_;
  std::vector<Var<T>> shards_;
  std::uint64_t layout_ = 0;
  std::optional<Partition> chunks_;                     // the reduction group as a 1-D grid
  std::vector<std::unique_ptr<AllGather<T>>> gathers_;  // per bucket (null: comm::allgatherv)
};

extern template class ShardedOptimizer<float>;
extern template class ShardedOptimizer<double>;

}  // namespace distop::parallel
