#include "distop/nn/all_max.hpp"

#include <Kokkos_Core.hpp>
#include <string>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/nn/all_min.hpp"

namespace distop::nn {

namespace {

// x *= mask, entry by entry.
template <class T>
void multiply(const Tensor<T>& mask, Tensor<T>& x) {
  auto mv = mask.view();
  auto xv = x.view();
  Kokkos::parallel_for(
      "distop::all_max_mask", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) { xv(i) *= mv(i); });
}

template <class T>
Var<T> extremum(Tape& tape, const Var<T>& x, const std::vector<int>& axes, bool minimum) {
  const std::string op = minimum ? "all_min" : "all_max";
  const TensorSpace& space = x.space();
  const Partition& partition = space.partition();
  for (int a : axes) {
    DISTOP_CHECK(a >= 0 && a < partition.dim(), op, "grid axis ", a, " out of range for ",
                 partition.str());
    DISTOP_CHECK(space.decomposition().replicates(a), op, "grid axis ", a, " splits the tensor (",
                 space.str(), "); only boxes that agree along the reduced axes can be compared");
  }
  const MPI_Comm group = partition.axes_comm(axes);
  // The backward all-reduces the output's gradient over the group: collective.
  return make_function<T>(
      tape, op, {x},
      [&](bool recording) {
        auto y = DistTensor<T>::uninitialized(space);
        const std::int64_t n = y.local_numel();
        std::vector<int> owner(static_cast<std::size_t>(n));
        int me = 0;
        if (group != MPI_COMM_NULL) {
          const T* in = x.value().data();
          if (minimum) {
            comm::allreduce_minloc(in, y.data(), owner.data(), n, group);
          } else {
            comm::allreduce_maxloc(in, y.data(), owner.data(), n, group);
          }
          DISTOP_MPI_CHECK(MPI_Comm_rank(group, &me), op);
        }
        Tensor<T> mask;  // 1 where this rank holds the extremum
        if (recording) {
          std::vector<T> keep(owner.size());
          for (std::size_t i = 0; i < owner.size(); ++i) keep[i] = owner[i] == me ? T(1) : T(0);
          mask = Tensor<T>::from_vector(space.local_shape(), keep);
        }
        return Computed{std::move(y), [mask, group](const DistTensor<T>& dy, Gradients<T>& grads) {
                          auto dx = DistTensor<T>::uninitialized(grads.input(0).space());
                          if (group != MPI_COMM_NULL) {
                            comm::allreduce_sum(dy.data(), dx.data(), dx.local_numel(), group);
                            multiply(mask, dx.local());
                          }
                          grads.add(0, std::move(dx));
                        }};
      },
      FunctionOptions{.collective = true});
}

}  // namespace

template <class T>
Var<T> all_max(Tape& tape, const Var<T>& x, const std::vector<int>& axes) {
  return extremum(tape, x, axes, false);
}

template <class T>
Var<T> all_min(Tape& tape, const Var<T>& x, const std::vector<int>& axes) {
  return extremum(tape, x, axes, true);
}

#define DISTOP_INSTANTIATE(T)                                             \
  template Var<T> all_max(Tape&, const Var<T>&, const std::vector<int>&); \
  template Var<T> all_min(Tape&, const Var<T>&, const std::vector<int>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
