#include "distop/ops/all_sum_reduce.hpp"

#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"

namespace distop {

template <class T>
AllSumReduce<T>::AllSumReduce(const TensorSpace& space, std::vector<int> axes) : space_(space) {
  const auto& d = space.decomposition();
  for (int a : axes) {
    DISTOP_CHECK(a >= 0 && a < space.partition().dim(), "AllSumReduce", "grid axis ", a,
                 " out of range for ", space.partition().str());
    DISTOP_CHECK(d.replicates(a), "AllSumReduce", "grid axis ", a, " splits the tensor (",
                 space.str(), "); only boxes that agree along the summed axes can be added");
  }
  comm_ = space.partition().axes_comm(std::move(axes));
  if (comm_ != MPI_COMM_NULL) DISTOP_MPI_CHECK(MPI_Comm_size(comm_, &group_size_), "AllSumReduce");
}

template <class T>
CommStats AllSumReduce<T>::forward_stats() const {
  if (group_size_ <= 1) return {};
  const std::int64_t g = group_size_;
  const std::int64_t bytes = 2 * (g - 1) * space_.local_shape().numel() * static_cast<std::int64_t>(sizeof(T)) / g;
  return {2 * (g - 1), bytes, 2 * (g - 1), bytes};
}

template <class T>
void AllSumReduce<T>::run(const DistTensor<T>& in, DistTensor<T>& out) const {
  if (comm_ == MPI_COMM_NULL) return;
  comm::allreduce_sum(in.data(), out.data(), in.local_numel(), comm_);
}

template <class T>
void AllSumReduce<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  run(x, y);
}

template <class T>
void AllSumReduce<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  run(y, x);
}

template class AllSumReduce<float>;
template class AllSumReduce<double>;

}  // namespace distop
