#pragma once
// HaloPad<T>: places each rank's block into its padded local array, ready for a HaloExchange.

#include <memory>
#include <vector>

#include "distop/kernels/box.hpp"
#include "distop/ops/halo_exchange.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// The embedding of the interior space of a halo exchange into its padded space.
//   domain: halo.interior_space(), each rank's block;   range: halo.domain(), the padded arrays.
//   forward (y = E x): the interior box of y holds x, every ghost entry of y is zero.
//   adjoint (x = E* y): x is the interior box of y (ghosts dropped): the restriction, since
//     <E x, y> = sum over interior entries of x y = <x, E* y>.
//   collective over: nothing; local copies only (no messages).
// A distributed convolution or pooling applies HaloExchange after it: H E x is the block with its
// ghost zones filled, and E* H* sends the ghost gradients home and keeps the interior.
template <class T>
class HaloPad final : public LinearOperator<T> {
 public:
  explicit HaloPad(std::shared_ptr<const HaloExchange<T>> halo);

  const TensorSpace& domain() const override { return halo_->interior_space(); }
  const TensorSpace& range() const override { return halo_->domain(); }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "HaloPad"; }

 private:
  std::shared_ptr<const HaloExchange<T>> halo_;
  // The boxes the kernels move, described once: x's whole block, the interior box of y, and the
  // slabs of y outside it (at most two per axis) that the forward zeroes.
  kernels::BoxPlan block_;
  kernels::BoxPlan interior_;
  std::vector<kernels::BoxPlan> ghost_slabs_;
};

extern template class HaloPad<float>;
extern template class HaloPad<double>;

}  // namespace distop
