#include "distop/ops/halo_pad.hpp"

#include "distop/kernels/box.hpp"

namespace distop {

template <class T>
HaloPad<T>::HaloPad(std::shared_ptr<const HaloExchange<T>> halo) : halo_(std::move(halo)) {
  if (!halo_->domain().partition().active()) return;
  // What lies outside the interior, as at most two slabs per axis: along axis a, below and above
  // the interior, within the interior along the axes before a and whole along those after.
  const Box& interior = halo_->interior_box();
  const Shape& shape = halo_->domain().local_shape();
  block_ = kernels::BoxPlan(halo_->interior_space().local_shape(),
                            whole(halo_->interior_space().local_shape()));
  interior_ = kernels::BoxPlan(shape, interior);
  Box slab = whole(shape);
  for (int a = 0; a < shape.rank(); ++a) {
    const auto u = static_cast<std::size_t>(a);
    const std::int64_t lo = interior.offset[u], hi = lo + interior.extent[u];
    slab.offset[u] = 0;
    slab.extent[u] = lo;
    if (!slab.empty()) ghost_slabs_.emplace_back(shape, slab);
    slab.offset[u] = hi;
    slab.extent[u] = shape[a] - hi;
    if (!slab.empty()) ghost_slabs_.emplace_back(shape, slab);
    slab.offset[u] = lo;
    slab.extent[u] = interior.extent[u];
  }
}

template <class T>
void HaloPad<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  if (x.local_numel() == 0 && y.local_numel() == 0) return;
  // Zero what lies outside the interior, then copy the block in: each entry is written once.
  for (const auto& slab : ghost_slabs_) kernels::fill_box(y.local(), slab, T(0));
  kernels::copy_box(x.local(), block_, y.local(), interior_);
}

template <class T>
void HaloPad<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  if (x.local_numel() == 0) return;
  kernels::copy_box(y.local(), interior_, x.local(), block_);
}

template class HaloPad<float>;
template class HaloPad<double>;

}  // namespace distop
