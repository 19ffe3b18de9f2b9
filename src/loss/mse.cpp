#include "distop/loss/mse.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/reduce.hpp"
#include "scalar.hpp"

namespace distop::loss {

template <class T>
Var<T> mse(Tape& tape, const Var<T>& x, const DistTensor<T>& target) {
  check_space(target, x.space(), "mse", "the target");
  const double numel = static_cast<double>(x.space().global_shape().numel());
  return make_function<T>(tape, "mse", {x}, [&] {
    DistTensor<T> diff = x.value().clone();
    kernels::axpy(T(-1), target.local(), diff.local());
    const double sum = kernels::dot(diff.local(), diff.local());
    auto backward = [diff, numel](const DistTensor<T>& dy, Gradients<T>& grads) mutable {
      // The saved difference becomes the gradient: a backward runs once.
      kernels::scale(static_cast<T>(2.0 * detail::scalar_grad(dy) / numel), diff.local());
      grads.add(0, std::move(diff));
    };
    return Computed{detail::scalar<T>(x.space().partition(), numel > 0 ? sum / numel : 0.0),
                    std::move(backward)};
  });
}

template Var<float> mse(Tape&, const Var<float>&, const DistTensor<float>&);
template Var<double> mse(Tape&, const Var<double>&, const DistTensor<double>&);

}  // namespace distop::loss
