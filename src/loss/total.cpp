#include "distop/loss/total.hpp"

#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"

namespace distop::loss {

template <class T>
double total(const Var<T>& loss) {
  const TensorSpace& space = loss.space();
  DISTOP_CHECK(space.global_shape() == Shape{1}, "loss::total",
               "expected a loss of global shape [1], found ", space.str());
  double sum = loss.value().local_numel() > 0 ? double(loss.value().local().to_vector()[0]) : 0.0;
  DISTOP_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, space.partition().parent()),
      "loss::total");
  return sum;
}

template double total(const Var<float>&);
template double total(const Var<double>&);

}  // namespace distop::loss
