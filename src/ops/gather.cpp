#include "distop/ops/gather.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/scatter.hpp"

#include <algorithm>

#include "distop/ops/all_gather.hpp"

namespace distop {

TensorSpace root_space(MPI_Comm parent, const Shape& global, int root) {
  const Shape grid(std::vector<std::int64_t>(static_cast<std::size_t>(global.rank()), 1));
  return TensorSpace(global, Partition(parent, grid, {root}));
}

template <class T>
Gather<T>::Gather(const TensorSpace& src, int root)
    : Repartition<T>(src, root_space(src.partition().parent(), src.global_shape(), root)) {}

template <class T>
Scatter<T>::Scatter(const TensorSpace& dst, int root)
    : Repartition<T>(root_space(dst.partition().parent(), dst.global_shape(), root), dst) {}

TensorSpace gathered_space(const TensorSpace& split, const std::vector<int>& axes) {
  const auto& d = split.decomposition();
  for (int g : axes)
    DISTOP_CHECK(g >= 0 && g < split.partition().dim(), "AllGather", "grid axis ", g,
                 " out of range for ", split.partition().str());
  std::vector<int> map = d.axis_map();
  std::vector<std::vector<std::int64_t>> extents;
  for (int t = 0; t < split.rank(); ++t) {
    const bool gathered = map[t] >= 0 && std::find(axes.begin(), axes.end(), map[t]) != axes.end();
    if (gathered) map[t] = -1;
    std::vector<std::int64_t> e;
    if (map[t] < 0) {
      e.push_back(split.global_shape()[t]);
    } else {
      const auto& b = d.bounds(t);
      for (std::size_t i = 0; i + 1 < b.size(); ++i) e.push_back(b[i + 1] - b[i]);
    }
    extents.push_back(std::move(e));
  }
  return TensorSpace(split.partition(),
                     Decomposition::blocks(split.global_shape(), d.grid(), extents, map));
}

template <class T>
AllGather<T>::AllGather(const TensorSpace& split, const std::vector<int>& axes)
    : Repartition<T>(split, gathered_space(split, axes)) {}

template <class T>
ReduceScatter<T>::ReduceScatter(const TensorSpace& split, const std::vector<int>& axes)
    : ReversedRepartition<T>(
          std::make_shared<const RepartitionPlan>(split, gathered_space(split, axes))) {}

template class Gather<float>;
template class Gather<double>;
template class Scatter<float>;
template class Scatter<double>;
template class AllGather<float>;
template class AllGather<double>;
template class ReduceScatter<float>;
template class ReduceScatter<double>;

}  // namespace distop
