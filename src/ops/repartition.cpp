#include "distop/ops/repartition.hpp"

#include <climits>

#include "distop/comm/agree.hpp"
#include "distop/comm/exchange.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/kernels/box.hpp"

#include "../core/scratch.hpp"

namespace distop {

namespace {

constexpr const char* kOp = "Repartition";
constexpr int kTag = 31;

// The global box of a grid cell.
Box box_of(const TensorSpace& s, const std::vector<int>& coords) {
  return Box{s.decomposition().local_offset(coords),
             s.decomposition().local_shape(coords).extents()};
}

// Whether the destination cell at `dst_coords` reads the source cell at `src_coords` where their
// boxes meet. Where the source replicates along a grid axis, one replica is read: on one shared
// partition, the replica with the destination's own coordinate on that axis (each replica group
// serves its own ranks, as an MPI collective over the group does); between two partitions, the
// canonical copy, coordinate 0.
bool reads(const TensorSpace& src, const std::vector<int>& src_coords, bool one_partition,
           const std::vector<int>& dst_coords) {
  for (int g = 0; g < src.partition().dim(); ++g)
    if (src.decomposition().replicates(g) && src_coords[g] != (one_partition ? dst_coords[g] : 0))
      return false;
  return true;
}

// Whether the boxes are pairwise disjoint and together cover exactly `numel` entries (so that,
// lying inside a tensor of numel entries, they tile it: every entry written exactly once).
bool tiles(const std::vector<const Box*>& boxes, std::int64_t numel) {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    total += boxes[i]->numel();
    for (std::size_t j = 0; j < i; ++j)
      if (boxes[i]->intersects(*boxes[j])) return false;
  }
  return total == numel;
}

}  // namespace

RepartitionPlan::RepartitionPlan(TensorSpace src, TensorSpace dst)
    : src_(std::move(src)), dst_(std::move(dst)) {
  std::string problem;
  try {
    build();
  } catch (const Error& e) {
    problem = e.detail();
  }
  comm::Fingerprint fp;
  fp.add(src_.fingerprint()).add(dst_.fingerprint());
  // Both spaces on one partition (an all-gather, say): its ranks alone take part.
  const bool one_partition = src_.partition().same_as(dst_.partition());
  comm::agree_on_arguments(one_partition ? src_.partition().comm() : src_.partition().parent(), kOp,
                           fp.value(), problem,
                           "this rank asked to move " + src_.str() + " to " + dst_.str());
}

void RepartitionPlan::build() {
  DISTOP_CHECK(src_.global_shape() == dst_.global_shape(), kOp, "source shape ",
               src_.global_shape().str(), " differs from destination shape ",
               dst_.global_shape().str());
  int same = MPI_UNEQUAL;
  DISTOP_MPI_CHECK(MPI_Comm_compare(src_.partition().parent(), dst_.partition().parent(), &same),
                   kOp);
  DISTOP_CHECK(same == MPI_IDENT || same == MPI_CONGRUENT, kOp,
               "the spaces' partitions come from different parent communicators");
  pass_through_ = src_ == dst_;
  if (pass_through_) return;
  const int me = src_.partition().parent_rank();
  const auto& sp = src_.partition();
  const auto& dp = dst_.partition();
  const bool one_partition = sp.same_as(dp);
  const bool src_active = sp.active();
  const bool dst_active = dp.active();
  const Box mine_src = src_active ? box_of(src_, sp.coords()) : Box{};
  const Box mine_dst = dst_active ? box_of(dst_, dp.coords()) : Box{};
  if (dst_active) {
    for (int i = 0; i < sp.size(); ++i) {
      const auto c = sp.coords_of(i);
      if (!reads(src_, c, one_partition, dp.coords())) continue;
      const Box overlap = box_of(src_, c).intersect(mine_dst);
      if (overlap.empty()) continue;
      const int peer = sp.ranks()[i];
      if (peer == me) {
        const Box from = overlap.relative_to(mine_src.offset);
        const Box to = overlap.relative_to(mine_dst.offset);
        local_.push_back({from, to, kernels::BoxPlan(src_.local_shape(), from),
                          kernels::BoxPlan(dst_.local_shape(), to)});
      } else {
        const Box to = overlap.relative_to(mine_dst.offset);
        recvs_.push_back({peer, to, kernels::BoxPlan(dst_.local_shape(), to)});
      }
    }
  }
  if (src_active) {
    for (int i = 0; i < dp.size(); ++i) {
      const int peer = dp.ranks()[i];
      const auto c = dp.coords_of(i);
      if (peer == me || !reads(src_, sp.coords(), one_partition, c)) continue;
      const Box overlap = box_of(dst_, c).intersect(mine_src);
      if (overlap.empty()) continue;
      const Box from = overlap.relative_to(mine_src.offset);
      sends_.push_back({peer, from, kernels::BoxPlan(src_.local_shape(), from)});
    }
  }
  {
    // How the reverse transfer writes x (see accumulate_reverse), from the boxes alone.
    std::vector<const Box*> boxes;
    for (const auto& l : local_) boxes.push_back(&l.src);
    const std::int64_t numel = src_active ? src_.local_shape().numel() : 0;
    reverse_local_tiles_ = tiles(boxes, numel);
    if (!reverse_local_tiles_) {
      for (const auto& t : sends_) boxes.push_back(&t.box);
      reverse_all_tile_ = tiles(boxes, numel);
    }
  }
  for (const auto* list : {&sends_, &recvs_})
    for (const auto& t : *list)
      DISTOP_CHECK(t.box.numel() <= INT_MAX, kOp, "a message of ", t.box.numel(),
                   " entries between ranks ", me, " and ", t.peer,
                   " exceeds MPI's int count limit; split the tensor over more ranks");
}


template <class T>
void RepartitionPlan::copy_forward(const Tensor<T>& x, Tensor<T>& y) const {
  // Every entry of y comes from exactly one source entry: receives and local copies
  // overwrite, and no fill is needed. Contiguous boxes travel straight from x and into y.
  // Staging for the boxes that are not contiguous, leased from the scratch pool (no allocation
  // once the pool holds blocks of these sizes); declared before the exchange, so that they
  // outlive any message still in flight if an error ends the call.
  std::vector<detail::Scratch<T>> in(recvs_.size());
  std::vector<detail::Scratch<T>> out;
  out.reserve(sends_.size());
  comm::Exchange<T> ex(src_.partition().parent(), kTag);
  for (std::size_t i = 0; i < recvs_.size(); ++i) {
    const auto& r = recvs_[i];
    const auto at = contiguous_offset(y.shape(), r.box);
    T* to = at >= 0 ? y.data() + at : nullptr;
    if (at < 0) {
      in[i] = detail::Scratch<T>(r.box.numel());
      to = in[i].data();
    }
    ex.recv(to, r.box.numel(), r.peer);
  }
  for (const auto& s : sends_) {
    const auto at = contiguous_offset(x.shape(), s.box);
    const T* from = at >= 0 ? x.data() + at : nullptr;
    if (at < 0) {
      out.emplace_back(s.box.numel());
      kernels::pack(x, s.plan, out.back().data());
      from = out.back().data();
    }
    ex.send(from, s.box.numel(), s.peer);
  }
  for (const auto& l : local_) kernels::copy_box(x, l.src_plan, y, l.dst_plan);
  ex.wait();
  for (std::size_t i = 0; i < recvs_.size(); ++i)
    if (in[i].data() != nullptr) kernels::unpack(in[i].data(), recvs_[i].plan, y);
}

template <class T>
void RepartitionPlan::accumulate_reverse(const Tensor<T>& y, Tensor<T>& x) const {
  // x's entries receive the sums of their copies. Where the local copies alone tile x (a
  // replicated destination, as in reduce-scatter), they overwrite x and the received copies are
  // added; where all the boxes together tile x (every entry has exactly one copy), everything
  // overwrites and contiguous boxes are received in place; otherwise x is zeroed first and every
  // copy is added.
  const bool local_tiles = reverse_local_tiles_;
  const bool all_tile = reverse_all_tile_;
  if (!local_tiles && !all_tile) x.fill(T(0));
  const bool add_received = !all_tile;
  const bool add_local = !local_tiles && !all_tile;

  std::vector<detail::Scratch<T>> in(sends_.size());
  std::vector<detail::Scratch<T>> out;
  out.reserve(recvs_.size());
  comm::Exchange<T> ex(src_.partition().parent(), kTag + 1);
  for (std::size_t i = 0; i < sends_.size(); ++i) {
    const auto& s = sends_[i];
    const auto at = add_received ? -1 : contiguous_offset(x.shape(), s.box);
    T* to = at >= 0 ? x.data() + at : nullptr;
    if (at < 0) {
      in[i] = detail::Scratch<T>(s.box.numel());
      to = in[i].data();
    }
    ex.recv(to, s.box.numel(), s.peer);
  }
  for (const auto& r : recvs_) {
    const auto at = contiguous_offset(y.shape(), r.box);
    const T* from = at >= 0 ? y.data() + at : nullptr;
    if (at < 0) {
      out.emplace_back(r.box.numel());
      kernels::pack(y, r.plan, out.back().data());
      from = out.back().data();
    }
    ex.send(from, r.box.numel(), r.peer);
  }
  for (const auto& l : local_) kernels::copy_box(y, l.dst_plan, x, l.src_plan, add_local);
  ex.wait();
  for (std::size_t i = 0; i < sends_.size(); ++i)
    if (in[i].data() != nullptr) kernels::unpack(in[i].data(), sends_[i].plan, x, add_received);
}

CommStats RepartitionPlan::forward_stats(std::size_t element) const {
  CommStats s;
  const auto e = static_cast<std::int64_t>(element);
  for (const auto& t : sends_) {
    ++s.messages_sent;
    s.bytes_sent += t.box.numel() * e;
  }
  for (const auto& t : recvs_) {
    ++s.messages_received;
    s.bytes_received += t.box.numel() * e;
  }
  return s;
}

CommStats RepartitionPlan::reverse_stats(std::size_t element) const {
  const auto f = forward_stats(element);
  return {f.messages_received, f.bytes_received, f.messages_sent, f.bytes_sent};
}

template <class T>
Repartition<T>::Repartition(const TensorSpace& src, const TensorSpace& dst)
    : plan_(std::make_shared<const RepartitionPlan>(src, dst)) {}

template <class T>
void Repartition<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  if (plan_->pass_through()) {
    y.local() = x.local();  // shares storage: no copy
    return;
  }
  plan_->copy_forward(x.local(), y.local());
}

template <class T>
void Repartition<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  if (plan_->pass_through()) {
    x.local() = y.local();
    return;
  }
  plan_->accumulate_reverse(y.local(), x.local());
}

template <class T>
void ReversedRepartition<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  if (plan_->pass_through()) {
    y.local() = x.local();
    return;
  }
  plan_->accumulate_reverse(x.local(), y.local());
}

template <class T>
void ReversedRepartition<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  if (plan_->pass_through()) {
    x.local() = y.local();
    return;
  }
  plan_->copy_forward(y.local(), x.local());
}

template void RepartitionPlan::copy_forward(const Tensor<float>&, Tensor<float>&) const;
template void RepartitionPlan::copy_forward(const Tensor<double>&, Tensor<double>&) const;
template void RepartitionPlan::accumulate_reverse(const Tensor<float>&, Tensor<float>&) const;
template void RepartitionPlan::accumulate_reverse(const Tensor<double>&, Tensor<double>&) const;
template class Repartition<float>;
template class Repartition<double>;
template class ReversedRepartition<float>;
template class ReversedRepartition<double>;

}  // namespace distop
