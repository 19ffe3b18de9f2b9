#include "distop/nn/reduction.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/reduce.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

// The axes, counted from 0, sorted; checked to be distinct and unsplit.
std::vector<int> reduced_axes(const TensorSpace& xs, std::vector<int> axes, const char* op) {
  DISTOP_CHECK(!axes.empty(), op, "no axes to reduce over given; ", op,
               "(tape, x) reduces all of x");
  for (int& a : axes) a = detail::normalize_axis(a, xs.rank(), op);
  std::sort(axes.begin(), axes.end());
  DISTOP_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), op,
               "an axis is named twice for ", xs.str());
  for (int a : axes)
    DISTOP_CHECK(!detail::split(xs, a), op, "axis ", a, " of ", xs.str(),
                 " is split over the grid; ", op,
                 " reduces each rank's own box only: sum across ranks with the SumReduce or "
                 "AllSumReduce operator (ops/sum_reduce.hpp, ops/all_sum_reduce.hpp)");
  return axes;
}

// y = alpha (the sum of x over `axes`, in `out_space`), for x's box seen with shape `box`.
template <class T>
Var<T> reduce(Tape& tape, const Var<T>& x, const char* op, std::vector<int> axes, Shape box,
              const TensorSpace& out_space, double alpha) {
  const T a = static_cast<T>(alpha);
  return make_function<T>(tape, op, {x}, [&] {
    auto y = DistTensor<T>::uninitialized(out_space);
    if (y.local_numel() > 0)
      kernels::sum_axes(x.value().local().reshaped(box), axes, a, T(0), y.local());
    return Computed{std::move(y), [axes = std::move(axes), box = std::move(box), a](
                                      const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (g.numel() == 0) return;
                        Tensor<T> g_box = g.reshaped(box);
                        kernels::broadcast_axes(dy.local(), axes, a, beta, g_box);
                      });
                    }};
  });
}

template <class T>
Var<T> reduce_axes(Tape& tape, const Var<T>& x, std::vector<int> axes, bool keepdim, bool mean,
                   const char* op) {
  const TensorSpace& xs = x.space();
  axes = reduced_axes(xs, std::move(axes), op);
  double alpha = 1;
  if (mean) {
    std::int64_t count = 1;
    for (int a : axes) count *= xs.global_shape()[a];
    alpha = count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  }
  TensorSpace out = detail::reduced_space(xs, axes, keepdim);
  return reduce(tape, x, op, std::move(axes), xs.local_shape(), out, alpha);
}

template <class T>
Var<T> reduce_all(Tape& tape, const Var<T>& x, bool mean, const char* op) {
  const TensorSpace& xs = x.space();
  const std::int64_t count = xs.global_shape().numel();
  double alpha = 1;
  if (mean)
    alpha = count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  // The box as one axis, summed whole.
  return reduce(tape, x, op, {0}, Shape{xs.local_shape().numel()},
                detail::scalar_space(xs.partition()), alpha);
}

}  // namespace

template <class T>
Var<T> sum(Tape& tape, const Var<T>& x, std::vector<int> axes, bool keepdim) {
  return reduce_axes(tape, x, std::move(axes), keepdim, false, "sum");
}
template <class T>
Var<T> mean(Tape& tape, const Var<T>& x, std::vector<int> axes, bool keepdim) {
  return reduce_axes(tape, x, std::move(axes), keepdim, true, "mean");
}
template <class T>
Var<T> sum(Tape& tape, const Var<T>& x) {
  return reduce_all(tape, x, false, "sum");
}
template <class T>
Var<T> mean(Tape& tape, const Var<T>& x) {
  return reduce_all(tape, x, true, "mean");
}

#define DISTOP_INSTANTIATE(T)                                         \
  template Var<T> sum(Tape&, const Var<T>&, std::vector<int>, bool);  \
  template Var<T> mean(Tape&, const Var<T>&, std::vector<int>, bool); \
  template Var<T> sum(Tape&, const Var<T>&);                          \
  template Var<T> mean(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
