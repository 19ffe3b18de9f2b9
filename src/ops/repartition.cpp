#include "distop/ops/repartition.hpp"

#include "distop/comm/exchange.hpp"
#include "distop/comm/mpi.hpp"

namespace distop {

namespace {

constexpr const char* kOp = "Repartition";
constexpr int kTag = 31;

// The global box of a grid cell.
Box box_of(const TensorSpace& s, const std::vector<int>& coords) {
  return Box{s.decomposition().local_offset(coords), s.decomposition().local_shape(coords).extents()};
}

bool canonical(const TensorSpace& s, const std::vector<int>& coords) {
  for (int g = 0; g < s.partition().dim(); ++g)
    if (s.decomposition().replicates(g) && coords[g] != 0) return false;
  return true;
}

}  // namespace

RepartitionPlan::RepartitionPlan(TensorSpace src, TensorSpace dst)
    : src_(std::move(src)), dst_(std::move(dst)) {
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
  const bool src_active = sp.active() && canonical(src_, sp.coords());
  const bool dst_active = dp.active();
  const Box mine_src = src_active ? box_of(src_, sp.coords()) : Box{};
  const Box mine_dst = dst_active ? box_of(dst_, dp.coords()) : Box{};
  if (dst_active) {
    for (int i = 0; i < sp.size(); ++i) {
      const auto c = sp.coords_of(i);
      if (!canonical(src_, c)) continue;
      const Box overlap = box_of(src_, c).intersect(mine_dst);
      if (overlap.empty()) continue;
      const int peer = sp.ranks()[i];
      if (peer == me) {
        local_.push_back({overlap.relative_to(mine_src.offset), overlap.relative_to(mine_dst.offset)});
      } else {
        recvs_.push_back({peer, overlap.relative_to(mine_dst.offset)});
      }
    }
  }
  if (src_active) {
    for (int i = 0; i < dp.size(); ++i) {
      const int peer = dp.ranks()[i];
      if (peer == me) continue;
      const Box overlap = box_of(dst_, dp.coords_of(i)).intersect(mine_src);
      if (!overlap.empty()) sends_.push_back({peer, overlap.relative_to(mine_src.offset)});
    }
  }
}

template <class T>
void RepartitionPlan::copy_forward(const Tensor<T>& x, Tensor<T>& y) const {
  comm::Exchange<T> ex(src_.partition().parent(), kTag);
  std::vector<Tensor<T>> in, out;
  for (const auto& r : recvs_) {
    in.push_back(Tensor<T>::uninitialized(Shape{r.box.numel()}));
    ex.recv(in.back().data(), r.box.numel(), r.peer);
  }
  for (const auto& s : sends_) {
    out.push_back(Tensor<T>::uninitialized(Shape{s.box.numel()}));
    kernels::pack(x, s.box, out.back().data());
    ex.send(out.back().data(), s.box.numel(), s.peer);
  }
  for (const auto& l : local_) kernels::copy_box(x, l.src, y, l.dst);
  ex.wait();
  for (std::size_t i = 0; i < recvs_.size(); ++i) kernels::unpack(in[i].data(), recvs_[i].box, y);
}

template <class T>
void RepartitionPlan::accumulate_reverse(const Tensor<T>& y, Tensor<T>& x) const {
  x.fill(T(0));
  comm::Exchange<T> ex(src_.partition().parent(), kTag + 1);
  std::vector<Tensor<T>> in, out;
  for (const auto& s : sends_) {
    in.push_back(Tensor<T>::uninitialized(Shape{s.box.numel()}));
    ex.recv(in.back().data(), s.box.numel(), s.peer);
  }
  for (const auto& r : recvs_) {
    out.push_back(Tensor<T>::uninitialized(Shape{r.box.numel()}));
    kernels::pack(y, r.box, out.back().data());
    ex.send(out.back().data(), r.box.numel(), r.peer);
  }
  for (const auto& l : local_) kernels::copy_box(y, l.dst, x, l.src, true);
  ex.wait();
  for (std::size_t i = 0; i < sends_.size(); ++i)
    kernels::unpack(in[i].data(), sends_[i].box, x, true);
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
