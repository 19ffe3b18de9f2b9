#include "distop/loss/dice.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/kernels/reduce.hpp"
#include "scalar.hpp"

namespace distop::loss {

namespace {

// sum(x) + sum(t) over the box, accumulated in double.
template <class T>
double sum_of_both(const Tensor<T>& x, const Tensor<T>& t) {
  auto xv = x.view();
  auto tv = t.view();
  double sum = 0;
  Kokkos::parallel_reduce(
      "distop::loss::dice_sums", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) {
        acc += static_cast<double>(xv(i)) + static_cast<double>(tv(i));
      },
      sum);
  return sum;
}

// g = beta g + a + b t (make_function's accumulate convention: g is not read with beta 0).
template <class T>
void dice_grads(const Tensor<T>& t, T a, T b, T beta, Tensor<T>& g) {
  auto tv = t.view();
  auto gv = g.view();
  const Kokkos::RangePolicy<ExecSpace> all(0, t.numel());
  if (beta == T(0))
    Kokkos::parallel_for(
        "distop::loss::dice_grads", all, KOKKOS_LAMBDA(std::int64_t i) { gv(i) = a + b * tv(i); });
  else
    Kokkos::parallel_for(
        "distop::loss::dice_grads", all,
        KOKKOS_LAMBDA(std::int64_t i) { gv(i) = a + b * tv(i) + beta * gv(i); });
}

// The sums of `values` over the ranks of `comm` (none when MPI_COMM_NULL), through a buffer in
// distop's memory space, as comm::allreduce_sum takes.
std::vector<double> sum_over(MPI_Comm comm, const std::vector<double>& values) {
  if (comm == MPI_COMM_NULL) return values;
  Tensor<double> buffer =
      Tensor<double>::from_vector(Shape{static_cast<std::int64_t>(values.size())}, values);
  comm::allreduce_sum(buffer.data(), buffer.data(), buffer.numel(), comm);
  return buffer.to_vector();
}

}  // namespace

template <class T>
Var<T> dice(Tape& tape, const Var<T>& input, const DistTensor<T>& target,
            const DiceOptions& options) {
  const char* op = "dice";
  DISTOP_CHECK(input.defined(), op, "the input is an undefined (default-constructed) Var");
  check_space(target, input.space(), op, "the target");
  DISTOP_CHECK(std::isfinite(options.smooth) && options.smooth >= 0, op,
               "expected a finite, non-negative smooth, found ", options.smooth);
  const Partition& p = input.space().partition();
  const double smooth = options.smooth;
  const Tensor<T> t = target.local();
  return make_function<T>(
      tape, op, {input},
      [&] {
        const Tensor<T>& x = input.value().local();
        // One allreduce of the partial sums: I = sum(x t), U = sum(x) + sum(t), global.
        const std::vector<double> sums =
            sum_over(p.comm(), {kernels::dot(x, t), sum_of_both(x, t)});
        const double num = 2 * sums[0] + smooth, den = sums[1] + smooth;
        const bool first = p.index() == 0;
        auto backward = [t, p, num, den, first](const DistTensor<T>& dy, Gradients<T>& grads) {
          // The loss is the first rank's component: every rank of the partition needs its seed.
          const double seed =
              sum_over(p.comm(), {first ? double(detail::scalar_grad(dy)) : 0.0})[0];
          // dL/dx_i = num / den^2 - 2 t_i / den.
          const T a = static_cast<T>(seed * num / (den * den));
          const T b = static_cast<T>(-2 * seed / den);
          grads.accumulate(0, [&](T beta, Tensor<T>& g) { dice_grads(t, a, b, beta, g); });
        };
        return Computed{detail::scalar<T>(p, first ? 1 - num / den : 0.0), std::move(backward)};
      },
      FunctionOptions{.collective = true});
}

template Var<float> dice(Tape&, const Var<float>&, const DistTensor<float>&, const DiceOptions&);
template Var<double> dice(Tape&, const Var<double>&, const DistTensor<double>&, const DiceOptions&);

}  // namespace distop::loss
