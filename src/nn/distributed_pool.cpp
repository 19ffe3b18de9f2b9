#include "distop/nn/distributed_pool.hpp"

#include <utility>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "spatial.hpp"

namespace distop::nn {

namespace {
constexpr const char* kOp = "DistributedPool";
}

template <class T>
DistributedPool<T>::DistributedPool(PoolKind kind, int dims, AxisValues kernel, PoolOptions options)
    : kind_(kind), dims_(dims), windows_(pool_windows(dims, kernel, options)) {}

template <class T>
TensorSpace DistributedPool<T>::output_space(const TensorSpace& in) const {
  const Shape& g = in.global_shape();
  DISTOP_CHECK(g.rank() == dims_ + 2, kOp, "expected an input [N, C, ", dims_,
               " spatial extents], found ", g.str());
  std::vector<std::int64_t> out{g[0], g[1]};
  const Shape m = detail::window_out(detail::spatial_of(g), windows_);
  out.insert(out.end(), m.begin(), m.end());
  return TensorSpace(Shape(out), in.partition());
}

template <class T>
const typename DistributedPool<T>::Plans& DistributedPool<T>::plans(const TensorSpace& x_space) {
  for (const auto& [space, p] : plans_)
    if (space == x_space) return p;
  const Shape& g = x_space.global_shape();
  const Partition& part = x_space.partition();
  DISTOP_CHECK(g.rank() == dims_ + 2 && part.dim() == g.rank() &&
                   x_space.decomposition() == Decomposition::balanced(g, part.shape()),
               kOp, "expected an input [N, C, ", dims_,
               " spatial extents] split balanced with one grid axis per tensor axis, found ",
               x_space.str());
  Plans p;
  p.out_space = output_space(x_space);
  TensorSpace padded = x_space;
  if (detail::needs_halo(g, part.shape(), windows_)) {
    p.halo = std::make_shared<const HaloExchange<T>>(x_space, detail::halo_windows(windows_));
    p.pad = std::make_shared<const HaloPad<T>>(p.halo);
    padded = p.halo->range();
  }
  if (part.active()) {
    const auto& c = part.coords();
    const std::vector<int> coords(c.begin() + 2, c.end());
    p.geometry = detail::local_geometry(detail::spatial_of(g), detail::spatial_of(part.shape()),
                                        coords, windows_, detail::spatial_of(padded.local_shape()));
  }
  plans_.emplace_back(x_space, std::move(p));
  return plans_.back().second;
}

template <class T>
Var<T> DistributedPool<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedPool", this->registered_path());
  const Plans& p = plans(x.space());
  Var<T> xh = p.halo ? apply<T>(tape, p.halo, apply<T>(tape, p.pad, x)) : x;
  return kind_ == PoolKind::max ? max_pool<T>(tape, xh, p.geometry, p.out_space)
                                : avg_pool<T>(tape, xh, p.geometry, p.out_space);
}

template class DistributedPool<float>;
template class DistributedPool<double>;

}  // namespace distop::nn
