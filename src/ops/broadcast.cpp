#include "distop/ops/broadcast.hpp"

#include "distop/ops/sum_reduce.hpp"

namespace distop {

template <class T>
Broadcast<T>::Broadcast(const TensorSpace& src, const Partition& dst)
    : Broadcast(BroadcastPlan::agreed(src, dst, "Broadcast"), src) {}

template <class T>
Broadcast<T>::Broadcast(std::shared_ptr<const BroadcastPlan> plan, const TensorSpace& src)
    : plan_(std::move(plan)), domain_(src), range_(plan_->broadcast_space(src)) {}

template <class T>
void Broadcast<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  plan_->broadcast(x.data(), x.local_numel(), y.data(), y.local_numel());
}

template <class T>
void Broadcast<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  plan_->reduce(y.data(), y.local_numel(), x.data(), x.local_numel());
}

template <class T>
SumReduce<T>::SumReduce(const Partition& src, const TensorSpace& dst)
    : SumReduce(BroadcastPlan::agreed(dst, src, "SumReduce"), dst) {}

template <class T>
SumReduce<T>::SumReduce(std::shared_ptr<const BroadcastPlan> plan, const TensorSpace& dst)
    : plan_(std::move(plan)), domain_(plan_->broadcast_space(dst)), range_(dst) {}

template <class T>
void SumReduce<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  plan_->reduce(x.data(), x.local_numel(), y.data(), y.local_numel());
}

template <class T>
void SumReduce<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  plan_->broadcast(y.data(), y.local_numel(), x.data(), x.local_numel());
}

template <class T>
CommStats Broadcast<T>::forward_stats() const {
  return plan_->broadcast_stats(domain_.local_shape().numel(), range_.local_shape().numel(),
                                sizeof(T));
}
template <class T>
CommStats Broadcast<T>::adjoint_stats() const {
  return plan_->reduce_stats(range_.local_shape().numel(), domain_.local_shape().numel(),
                             sizeof(T));
}
template <class T>
CommStats SumReduce<T>::forward_stats() const {
  return plan_->reduce_stats(domain_.local_shape().numel(), range_.local_shape().numel(),
                             sizeof(T));
}
template <class T>
CommStats SumReduce<T>::adjoint_stats() const {
  return plan_->broadcast_stats(range_.local_shape().numel(), domain_.local_shape().numel(),
                                sizeof(T));
}

template class Broadcast<float>;
template class Broadcast<double>;
template class SumReduce<float>;
template class SumReduce<double>;

}  // namespace distop
