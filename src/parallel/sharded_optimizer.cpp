#include "distop/parallel/sharded_optimizer.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "gradient_reducer.hpp"

namespace distop::parallel {

namespace {

constexpr const char* kOp = "ShardedOptimizer";

int to_int(std::int64_t n) {
  DISTOP_CHECK(n <= std::numeric_limits<int>::max(), kOp, "a tensor of ", n,
               " entries exceeds MPI's int count limit");
  return static_cast<int>(n);
}

template <class T>
std::vector<std::vector<Var<T>>> one_group(const GradientReducer<T>& reducer) {
  std::vector<Var<T>> params;
  for (const auto& p : reducer.parameters()) params.push_back(p.var);
  return {std::move(params)};
}

}  // namespace

template <class T>
ShardedOptimizer<T>::ShardedOptimizer(DataParallel<T>& data_parallel, int stage, Factory make)
    : ShardedOptimizer(data_parallel, stage, one_group(*data_parallel.reducer_),
                       make ? GroupFactory([make](std::vector<std::vector<Var<T>>> shards) {
                         return make(std::move(shards.at(0)));
                       })
                            : GroupFactory()) {}

template <class T>
ShardedOptimizer<T>::ShardedOptimizer(DataParallel<T>& data_parallel, int stage,
                                      std::vector<std::vector<Var<T>>> groups, GroupFactory make)
    : optim::Optimizer<T>(groups, kOp),
      reducer_(data_parallel.reducer_.get()),
      stage_(stage),
      make_(std::move(make)) {
  GradientReducer<T>& reducer = *reducer_;
  DISTOP_CHECK(stage == 1 || stage == 2, kOp, "ZeRO stage ", stage,
               " is not one of the sharded stages 1 and 2");
  DISTOP_CHECK(static_cast<bool>(make_), kOp, "no optimizer factory given");
  const auto& named = reducer.parameters();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups_.emplace_back();
    for (std::size_t k = 0; k < groups[g].size(); ++k) {
      std::size_t i = 0;
      while (i < named.size() && !named[i].var.same_as(groups[g][k])) ++i;
      DISTOP_CHECK(i < named.size(), kOp, "parameter ", k, " of group ", g,
                   " is not a parameter of the DataParallel's model");
      groups_[g].push_back(i);
      order_.push_back(i);
    }
  }
  const Replicas& replicas = reducer.replicas();
  chunks_.emplace(replicas.reduction_comm(), Shape{replicas.count()});
  reducer.set_gather_gradients(stage == 1);
  reducer.set_shard_gradients(stage == 2);
  stepped_ = reducer.reductions();
  make_pieces();
}

template <class T>
std::pair<std::int64_t, std::int64_t> ShardedOptimizer<T>::part(const Place& p, int q) const {
  const auto lo = std::max(p.offset, p.bounds[static_cast<std::size_t>(q)]);
  const auto hi = std::min(p.offset + p.elements, p.bounds[static_cast<std::size_t>(q) + 1]);
  return {lo - p.offset, std::max<std::int64_t>(hi - lo, 0)};
}

template <class T>
void ShardedOptimizer<T>::make_pieces() {
  const GradientReducer<T>& r = *reducer_;
  const int me = r.replicas().index();
  const auto& named = r.parameters();
  places_.assign(named.size(), Place{});
  pieces_.clear();
  shards_.clear();
  gathers_.clear();
  const Partition self = Partition::self();
  const int replicas = r.replicas().count();
  for (std::size_t b = 0; b < r.bucket_count(); ++b) {
    const auto& bounds = r.chunk_bounds(b);
    for (const auto& slot : r.bucket_slots(b)) {
      Place& p = places_[slot.parameter];
      p.bucket = b;
      p.offset = static_cast<std::int64_t>(slot.offset);
      p.elements = static_cast<std::int64_t>(slot.elements);
      p.bounds = bounds;
    }
    // The parameters' all-gather: the bucket as a 1-D tensor split over the replicas as its
    // chunks are (balanced), when no chunk is empty.
    const std::int64_t n = bounds.back();
    if (replicas > 1 && n >= replicas) {
      const TensorSpace split(Shape{n}, *chunks_);
      DISTOP_CHECK(split.local_offset()[0] == bounds[static_cast<std::size_t>(me)], kOp,
                   "the bucket's chunks do not match a balanced split");
      gathers_.push_back(std::make_unique<AllGather<T>>(split, std::vector<int>{0}));
    } else {
      gathers_.push_back(nullptr);
    }
  }
  // This replica's pieces, group by group (the wrapped optimizer's parameter order), each a flat
  // view of its piece of the parameter, its gradient the same piece of the bucket's owned chunk.
  std::vector<std::vector<Var<T>>> shard_groups(groups_.size());
  std::size_t index = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (const std::size_t i : groups_[g]) {
      Place& p = places_[i];
      const auto [start, count] = part(p, me);
      const std::size_t j = index++;
      if (count == 0) continue;
      p.piece = static_cast<std::int64_t>(pieces_.size());
      pieces_.push_back(Piece{i, j, start, count});
      const Var<T>& param = named[i].var;
      const TensorSpace space(Shape{count}, self);
      Var<T> shard(
          DistTensor<T>::from_local(
              space, param.value().local().reshaped(Shape{p.elements}).slice(start, Shape{count})),
          true);
      const std::int64_t lo = p.bounds[static_cast<std::size_t>(me)];
      shard.pin_grad(DistTensor<T>::from_local(
          space, r.owned_gradient(p.bucket).slice(p.offset + start - lo, Shape{count})));
      shards_.push_back(shard);
      shard_groups[g].push_back(shard);
    }
  }
  inner_ = make_(std::move(shard_groups));
  DISTOP_CHECK(inner_ != nullptr, kOp, "the factory made no optimizer");
  DISTOP_CHECK(inner_->group_count() == groups_.size(), kOp, "the factory made an optimizer of ",
               inner_->group_count(), " parameter groups, expected ", groups_.size());
  layout_ = r.layout_version();
}

template <class T>
void ShardedOptimizer<T>::gather_parameters() {
  const GradientReducer<T>& r = *reducer_;
  const int replicas = r.replicas().count();
  if (replicas == 1) return;  // the one replica owns every entry: updated in place
  const int me = r.replicas().index();
  const auto& named = r.parameters();
  for (std::size_t b = 0; b < r.bucket_count(); ++b) {
    const auto& bounds = r.chunk_bounds(b);
    const std::int64_t n = bounds.back();
    if (n == 0) continue;
    const auto slots = r.bucket_slots(b);
    const std::int64_t lo = bounds[static_cast<std::size_t>(me)];
    const std::int64_t hi = bounds[static_cast<std::size_t>(me) + 1];
    Tensor<T> whole = Tensor<T>::uninitialized(Shape{n});
    Tensor<T> mine = Tensor<T>::uninitialized(Shape{hi - lo});
    for (const auto& slot : slots) {  // this replica's updated pieces into its chunk
      const auto off = static_cast<std::int64_t>(slot.offset);
      const auto len = static_cast<std::int64_t>(slot.elements);
      const auto a = std::max(off, lo), e = std::min(off + len, hi);
      if (a >= e) continue;
      const Tensor<T> value = named[slot.parameter].var.value().local().reshaped(Shape{len});
      mine.slice(a - lo, Shape{e - a}).copy_from(value.slice(a - off, Shape{e - a}));
    }
    if (gathers_[b]) {
      const AllGather<T>& gather = *gathers_[b];
      const auto x = DistTensor<T>::from_local(gather.domain(), mine);
      auto y = DistTensor<T>::from_local(gather.range(), whole);
      gather.forward(x, y);
    } else {
      std::vector<int> counts, displs;
      for (int q = 0; q < replicas; ++q) {
        counts.push_back(
            to_int(bounds[static_cast<std::size_t>(q) + 1] - bounds[static_cast<std::size_t>(q)]));
        displs.push_back(to_int(bounds[static_cast<std::size_t>(q)]));
      }
      comm::allgatherv(mine.data(), hi - lo, whole.data(), counts.data(), displs.data(),
                       r.replicas().reduction_comm());
    }
    for (const auto& slot : slots) {  // every replica's pieces out to the parameters
      if (slot.elements == 0) continue;
      const auto len = static_cast<std::int64_t>(slot.elements);
      Tensor<T> value = named[slot.parameter].var.value().local().reshaped(Shape{len});
      value.copy_from(whole.slice(static_cast<std::int64_t>(slot.offset), Shape{len}));
    }
  }
}

template <class T>
void ShardedOptimizer<T>::step() {
  if (reducer_->layout_version() != layout_) {
    // The buckets were rebuilt: the state moves to the new ownership (collective).
    const optim::OptimizerState<T> whole = assemble();
    make_pieces();
    inner_->load_state_dict(sliced(whole));
  }
  const auto& named = reducer_->parameters();
  // A sharded bucket's owned chunk holds a gradient when a reduced pass came since the last
  // step; a whole bucket's pieces, when the parameter has one.
  const bool fresh = reducer_->reductions() != stepped_;
  for (std::size_t j = 0; j < pieces_.size(); ++j) {
    const Var<T>& shard = shards_[j];
    const std::size_t i = pieces_[j].parameter;
    if (reducer_->bucket_sharded(places_[i].bucket) ? fresh : named[i].var.has_grad()) {
      if (!shard.has_grad()) shard.new_grad_for_overwrite();  // the pinned view: no copy
    } else {
      shard.zero_grad();
    }
  }
  inner_->step();
  stepped_ = reducer_->reductions();
  gather_parameters();
}

template <class T>
optim::Hyperparameters ShardedOptimizer<T>::group_options(std::size_t g) const {
  this->check_group(g, kOp);
  return inner_->group_options(g);
}

template <class T>
optim::StateKeys ShardedOptimizer<T>::state_keys(std::size_t g) const {
  this->check_group(g, kOp);
  return inner_->state_keys(g);
}

template <class T>
double ShardedOptimizer<T>::group_lr(std::size_t g) const {
  return inner_->lr(g);
}

template <class T>
void ShardedOptimizer<T>::set_group_lr(std::size_t g, double lr) {
  inner_->set_lr(g, lr);
}

template <class T>
optim::OptimizerState<T> ShardedOptimizer<T>::assemble() const {
  const GradientReducer<T>& r = *reducer_;
  const MPI_Comm comm = r.replicas().reduction_comm();
  const int replicas = r.replicas().count();
  const int me = r.replicas().index();
  const auto& named = r.parameters();
  const optim::OptimizerState<T> local = inner_->state_dict();
  optim::OptimizerState<T> out;
  out.optimizer = local.optimizer;
  out.groups = local.groups;
  out.params.resize(order_.size());
  for (std::size_t j = 0; j < order_.size(); ++j) {
    const std::size_t i = order_[j];
    const optim::StateKeys keys = inner_->state_keys(this->group_of(j));
    const Place& p = places_[i];
    if (p.elements == 0) continue;  // no box on this rank: no state
    std::vector<int> counts, displs;
    int source = -1;  // the first replica holding a piece: it tells whether there is state
    for (int q = 0; q < replicas; ++q) {
      const auto [start, count] = part(p, q);
      counts.push_back(to_int(count));
      displs.push_back(to_int(start));
      if (count > 0 && source < 0) source = q;
    }
    const typename optim::OptimizerState<T>::Param* mine =
        p.piece >= 0 ? &local.params[static_cast<std::size_t>(p.piece)] : nullptr;
    // Whether the parameter has state, and its scalars, from `source`.
    std::vector<double> head(1 + keys.scalars.size(), 0.0);
    if (me == source) {
      head[0] = mine->empty() ? 0.0 : 1.0;
      for (std::size_t k = 0; k < keys.scalars.size() && !mine->empty(); ++k)
        head[k + 1] = mine->scalars.at(keys.scalars[k]);
    }
    DISTOP_MPI_CHECK(
        MPI_Bcast(head.data(), static_cast<int>(head.size()), MPI_DOUBLE, source, comm), kOp);
    if (head[0] == 0.0) continue;
    auto& whole = out.params[j];
    for (std::size_t k = 0; k < keys.scalars.size(); ++k)
      whole.scalars[keys.scalars[k]] = head[k + 1];
    const Shape& shape = named[i].var.value().local().shape();
    for (const auto& key : keys.tensors) {
      Tensor<T> t = Tensor<T>::uninitialized(Shape{p.elements});
      const T* send = mine ? mine->tensors.at(key).data() : t.data();
      comm::allgatherv(send, counts[static_cast<std::size_t>(me)], t.data(), counts.data(),
                       displs.data(), comm);
      whole.tensors.emplace(key, t.reshaped(shape));
    }
  }
  return out;
}

template <class T>
optim::OptimizerState<T> ShardedOptimizer<T>::sliced(const optim::OptimizerState<T>& state) const {
  optim::OptimizerState<T> out;
  out.optimizer = state.optimizer;
  out.groups = state.groups;
  for (const Piece& piece : pieces_) {
    const auto& whole = state.params.at(piece.index);
    typename optim::OptimizerState<T>::Param p;
    p.scalars = whole.scalars;
    for (const auto& [key, t] : whole.tensors)
      p.tensors.emplace(
          key, t.reshaped(Shape{t.numel()}).slice(piece.start, Shape{piece.count}).clone());
    out.params.push_back(std::move(p));
  }
  return out;
}

template <class T>
optim::OptimizerState<T> ShardedOptimizer<T>::state_dict() const {
  return assemble();
}

template <class T>
void ShardedOptimizer<T>::check_state_dict(const optim::OptimizerState<T>& state) const {
  const std::string op = std::string(kOp) + "::load_state_dict";
  const auto& named = reducer_->parameters();
  DISTOP_CHECK(state.params.size() == order_.size(), op, "the state has ", state.params.size(),
               " parameters, this optimizer ", order_.size());
  for (std::size_t j = 0; j < order_.size(); ++j) {
    const std::size_t i = order_[j];
    const Shape& shape = named[i].var.value().local().shape();
    for (const auto& [key, t] : state.params[j].tensors)
      DISTOP_CHECK(t.shape() == shape, op, "parameter ", j, " (", named[i].name,
                   ")'s state tensor '", key, "' has shape ", t.shape().str(),
                   ", expected the local shape ", shape.str(), " of the parameter's box");
  }
  inner_->check_state_dict(sliced(state));
}

template <class T>
void ShardedOptimizer<T>::load_state_dict(const optim::OptimizerState<T>& state) {
  check_state_dict(state);
  inner_->load_state_dict(sliced(state));
}

template <class T>
std::size_t ShardedOptimizer<T>::state_bytes() const {
  std::size_t bytes = 0;
  for (const auto& p : inner_->state_dict().params)
    for (const auto& [key, t] : p.tensors) bytes += static_cast<std::size_t>(t.numel()) * sizeof(T);
  return bytes;
}

template class ShardedOptimizer<float>;
template class ShardedOptimizer<double>;

}  // namespace distop::parallel
