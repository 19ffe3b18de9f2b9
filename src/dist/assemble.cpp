#include "distop/dist/assemble.hpp"

#include <climits>

#include "distop/comm/mpi.hpp"

namespace distop {

namespace {
bool owns_its_box(const TensorSpace& space) {
  const auto& p = space.partition();
  if (!p.active()) return false;
  for (int g = 0; g < p.dim(); ++g)
    if (space.decomposition().replicates(g) && p.coords()[g] != 0) return false;
  return true;
}
}  // namespace

template <class T>
std::vector<T> assemble(const DistTensor<T>& x, int root) {
  const auto& space = x.space();
  const auto n = space.global_shape().numel();
  std::vector<T> global(static_cast<std::size_t>(n), T(0));
  if (owns_its_box(space)) {
    const auto idx = space.global_indices();
    const HostTensor<T> box = to_host(x.local());  // the one copy out of x's memory space
    const T* v = box.data();
    for (std::size_t i = 0; i < idx.size(); ++i) global[static_cast<std::size_t>(idx[i])] = v[i];
  }
  const auto parent = space.partition().parent();
  const bool is_root = space.partition().parent_rank() == root;
  DISTOP_CHECK(n <= INT_MAX, "assemble", "tensor of ", n, " entries exceeds MPI's count limit");
  DISTOP_MPI_CHECK(MPI_Reduce(is_root ? MPI_IN_PLACE : global.data(), global.data(),
                              static_cast<int>(n), comm::mpi_type<T>(), MPI_SUM, root, parent),
                   "assemble");
  if (!is_root) global.clear();
  return global;
}

template <class T>
void distribute(const std::vector<T>& global, DistTensor<T>& x) {
  const auto& space = x.space();
  DISTOP_CHECK(static_cast<std::int64_t>(global.size()) == space.global_shape().numel(),
               "distribute", "expected ", space.global_shape().numel(), " entries for ",
               space.global_shape().str(), ", found ", global.size());
  const auto idx = space.global_indices();
  auto box = HostTensor<T>::uninitialized(space.local_shape());
  T* v = box.data();
  for (std::size_t i = 0; i < idx.size(); ++i) v[i] = global[static_cast<std::size_t>(idx[i])];
  deep_copy(x.local(), box);  // the one copy into x's memory space
}

template std::vector<float> assemble(const DistTensor<float>&, int);
template std::vector<double> assemble(const DistTensor<double>&, int);
template void distribute(const std::vector<float>&, DistTensor<float>&);
template void distribute(const std::vector<double>&, DistTensor<double>&);

}  // namespace distop
