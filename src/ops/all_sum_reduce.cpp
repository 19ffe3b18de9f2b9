#include "distop/ops/all_sum_reduce.hpp"

#include <climits>
#include <string>

#include "distop/comm/agree.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"

namespace distop {

namespace {
constexpr const char* kOp = "AllSumReduce";
}  // namespace

template <class T>
AllSumReduce<T>::AllSumReduce(const TensorSpace& space, std::vector<int> axes) : space_(space) {
  // Checked and agreed over the partition before its sub-communicator is split off, so that ranks
  // passing different axes or spaces all raise the same Error.
  std::string problem;
  try {
    const auto& d = space.decomposition();
    for (int a : axes) {
      DISTOP_CHECK(a >= 0 && a < space.partition().dim(), kOp, "grid axis ", a,
                   " out of range for ", space.partition().str());
      DISTOP_CHECK(d.replicates(a), kOp, "grid axis ", a, " splits the tensor (", space.str(),
                   "); only boxes that agree along the summed axes can be added");
    }
    const std::int64_t count = space.local_shape().numel();
    DISTOP_CHECK(count <= INT_MAX, kOp, "a box of ", count,
                 " entries exceeds MPI's int count limit; split the tensor over more ranks");
  } catch (const Error& e) {
    problem = e.detail();
  }
  comm::Fingerprint fp;
  fp.add(space.fingerprint()).add_all(axes);
  std::string mine = "this rank asked to sum " + space.str() + " along grid axes {";
  for (std::size_t i = 0; i < axes.size(); ++i) mine += (i ? ", " : "") + std::to_string(axes[i]);
  comm::agree_on_arguments(space.partition().comm(), kOp, fp.value(), problem, mine + "}");
  comm_ = space.partition().axes_comm(std::move(axes));
  if (comm_ != MPI_COMM_NULL) DISTOP_MPI_CHECK(MPI_Comm_size(comm_, &group_size_), "AllSumReduce");
}

template <class T>
CommStats AllSumReduce<T>::forward_stats() const {
  if (group_size_ <= 1) return {};
  const std::int64_t g = group_size_;
  const std::int64_t bytes =
      2 * (g - 1) * space_.local_shape().numel() * static_cast<std::int64_t>(sizeof(T)) / g;
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
