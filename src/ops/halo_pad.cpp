#include "distop/ops/halo_pad.hpp"

#include "distop/kernels/box.hpp"

namespace distop {

template <class T>
void HaloPad<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  if (x.local_numel() == 0 && y.local_numel() == 0) return;
  y.local().fill(T(0));
  kernels::copy_box(x.local(), whole(x.local().shape()), y.local(), halo_->interior_box());
}

template <class T>
void HaloPad<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  if (x.local_numel() == 0) return;
  kernels::copy_box(y.local(), halo_->interior_box(), x.local(), whole(x.local().shape()));
}

template class HaloPad<float>;
template class HaloPad<double>;

}  // namespace distop
