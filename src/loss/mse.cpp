#include "distop/loss/mse.hpp"

#include <utility>

#include "distop/core/trace.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/reduce.hpp"
#include "scalar.hpp"

namespace distop::loss {

template <class T>
Var<T> mse(Tape& tape, const Var<T>& x, const DistTensor<T>& target) {
  const trace::Compute span("mse");
  check_space(target, x.space(), "mse", "the target");
  const double numel = static_cast<double>(x.space().global_shape().numel());
  DistTensor<T> diff = x.value().clone();
  kernels::axpy(T(-1), target.local(), diff.local());
  const double sum = kernels::dot(diff.local(), diff.local());
  Var<T> loss(detail::scalar<T>(x.space().partition(), numel > 0 ? sum / numel : 0.0),
              x.requires_grad());
  if (!x.requires_grad()) return loss;

  tape.record("mse", [xin = x, loss, diff, numel, use = x.use()]() mutable {
    if (!loss.has_grad()) return;
    // The saved difference becomes the gradient: a tape entry runs once.
    kernels::scale(static_cast<T>(2.0 * detail::scalar_grad(loss.grad()) / numel), diff.local());
    xin.accumulate_grad(std::move(diff));
  });
  return loss;
}

template Var<float> mse(Tape&, const Var<float>&, const DistTensor<float>&);
template Var<double> mse(Tape&, const Var<double>&, const DistTensor<double>&);

}  // namespace distop::loss
