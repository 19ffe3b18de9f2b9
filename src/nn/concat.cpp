#include "distop/nn/concat.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/box.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

// The part of a box of shape `box` that starts at `offset` along `axis` and spans `extent`.
Box slab(const Shape& box, int axis, std::int64_t offset, std::int64_t extent) {
  Box b = whole(box);
  b.offset[static_cast<std::size_t>(axis)] = offset;
  b.extent[static_cast<std::size_t>(axis)] = extent;
  return b;
}

// The BoxPlans of the boxes concat and split copy, built at the first call that copies a box of
// a shape and shared by every later one (a model calls them with the same shapes step after
// step): the copies then allocate nothing and copy nothing from the host per call, also on a
// device, where a Box-taking kernel builds its plan on every call. Bounded: past kMaxPlans
// entries the cache starts again. Emptied when Kokkos finalizes (the plans hold Views).
class PlanCache {
 public:
  static kernels::BoxPlan plan(const Shape& shape, const Box& box) {
    static PlanCache* cache = [] {
      auto* c = new PlanCache;
      Kokkos::push_finalize_hook([c] {
        const std::lock_guard<std::mutex> lock(c->mutex_);
        c->plans_.clear();
      });
      return c;
    }();
    return cache->find_or_build(shape, box);
  }

 private:
  static constexpr std::size_t kMaxPlans = 256;

  kernels::BoxPlan find_or_build(const Shape& shape, const Box& box) {
    std::vector<std::int64_t> key(shape.begin(), shape.end());
    key.insert(key.end(), box.offset.begin(), box.offset.end());
    key.insert(key.end(), box.extent.begin(), box.extent.end());
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = plans_.find(key); it != plans_.end()) return it->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(std::move(key), kernels::BoxPlan(shape, box)).first->second;
  }

  std::mutex mutex_;
  std::map<std::vector<std::int64_t>, kernels::BoxPlan> plans_;
};

// dst[dst_box] = src[src_box] + beta dst[dst_box] for beta 0 or 1 (accumulate).
template <class T>
void copy_slab(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
               T beta) {
  if (src_box.empty()) return;
  kernels::copy_box(src, PlanCache::plan(src.shape(), src_box), dst,
                    PlanCache::plan(dst.shape(), dst_box), beta != T(0));
}

}  // namespace

template <class T>
Var<T> concat(Tape& tape, const std::vector<Var<T>>& xs, int axis) {
  const char* op = "concat";
  DISTOP_CHECK(!xs.empty(), op, "nothing to join");
  for (const auto& x : xs) DISTOP_CHECK(x.defined(), op, "an input is an undefined Var");
  const TensorSpace& s0 = xs[0].space();
  axis = detail::normalize_axis(axis, s0.rank(), op);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const TensorSpace& s = xs[i].space();
    DISTOP_CHECK(s.rank() == s0.rank() && s.partition().same_as(s0.partition()), op, "input ", i,
                 " (", s.str(), ") is not of the rank and on the partition of input 0 (", s0.str(),
                 ")");
    DISTOP_CHECK(!detail::split(s, axis), op, "axis ", axis, " of input ", i, " (", s.str(),
                 ") is split over the grid; concat joins each rank's own boxes along an unsplit "
                 "axis");
    for (int a = 0; a < s.rank(); ++a)
      DISTOP_CHECK(a == axis || detail::same_blocks(s, a, s0, a), op, "input ", i, " (", s.str(),
                   ") differs from input 0 (", s0.str(), ") in extent or split along axis ", a);
    total += s.global_shape()[axis];
  }
  const TensorSpace ys = s0.with_extent(axis, total);
  return make_function<T>(tape, op, xs, [&] {
    auto y = DistTensor<T>::uninitialized(ys);
    const Shape ybox = ys.local_shape();
    std::vector<std::int64_t> offsets;
    std::int64_t offset = 0;
    for (const auto& x : xs) {
      const Shape& box = x.space().local_shape();
      if (ybox.numel() > 0)
        copy_slab(x.value().local(), whole(box), y.local(), slab(ybox, axis, offset, box[axis]),
                  T(0));
      offsets.push_back(offset);
      offset += x.space().global_shape()[axis];
    }
    return Computed{
        std::move(y),
        [axis, ybox, offsets = std::move(offsets)](const DistTensor<T>& dy, Gradients<T>& grads) {
          for (std::size_t i = 0; i < grads.size(); ++i) {
            grads.accumulate(i, [&](T beta, Tensor<T>& g) {
              const Shape& box = g.shape();
              if (ybox.numel() > 0)
                copy_slab(dy.local(), slab(ybox, axis, offsets[i], box[axis]), g, whole(box), beta);
            });
          }
        }};
  });
}

template <class T>
std::vector<Var<T>> split(Tape& tape, const Var<T>& x, const std::vector<std::int64_t>& sizes,
                          int axis) {
  const char* op = "split";
  const TensorSpace& xs = x.space();
  axis = detail::normalize_axis(axis, xs.rank(), op);
  DISTOP_CHECK(!detail::split(xs, axis), op, "axis ", axis, " of ", xs.str(),
               " is split over the grid; split cuts each rank's own box along an unsplit axis");
  DISTOP_CHECK(!sizes.empty(), op, "no sizes given");
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    DISTOP_CHECK(s >= 0, op, "a negative size ", s);
    total += s;
  }
  DISTOP_CHECK(total == xs.global_shape()[axis], op, "the sizes add up to ", total, " but axis ",
               axis, " of ", xs.str(), " has extent ", xs.global_shape()[axis]);
  const Shape xbox = xs.local_shape();
  return make_function<T>(tape, op, {x}, [&] {
    std::vector<DistTensor<T>> values;
    std::vector<std::int64_t> offsets;
    std::int64_t offset = 0;
    for (std::int64_t s : sizes) {
      auto v = DistTensor<T>::uninitialized(xs.with_extent(axis, s));
      const Shape& box = v.space().local_shape();
      if (xbox.numel() > 0)
        copy_slab(x.value().local(), slab(xbox, axis, offset, s), v.local(), whole(box), T(0));
      values.push_back(std::move(v));
      offsets.push_back(offset);
      offset += s;
    }
    return Computed{
        std::move(values), [axis, xbox, sizes, offsets = std::move(offsets)](
                               std::span<const DistTensor<T>* const> dys, Gradients<T>& grads) {
          grads.accumulate(0, [&](T beta, Tensor<T>& g) {
            if (xbox.numel() == 0) return;
            for (std::size_t o = 0; o < dys.size(); ++o) {
              const Box part = slab(xbox, axis, offsets[o], sizes[o]);
              if (dys[o])
                copy_slab(dys[o]->local(), whole(dys[o]->local().shape()), g, part, beta);
              else if (beta == T(0) && !part.empty())
                kernels::fill_box(g, PlanCache::plan(g.shape(), part),
                                  T(0));  // fresh storage: no gradient reached this piece
            }
          });
        }};
  });
}

template <class T>
std::vector<Var<T>> chunk(Tape& tape, const Var<T>& x, std::int64_t chunks, int axis) {
  DISTOP_CHECK(chunks >= 1, "chunk", "expected at least 1 chunk, found ", chunks);
  axis = detail::normalize_axis(axis, x.space().rank(), "chunk");
  const std::int64_t n = x.space().global_shape()[axis];
  // torch's rule: pieces of ceil(n / chunks), the last what remains; n = 0 gives `chunks` empty
  // pieces.
  std::vector<std::int64_t> sizes;
  if (n == 0) {
    sizes.assign(static_cast<std::size_t>(chunks), 0);
  } else {
    const std::int64_t size = (n + chunks - 1) / chunks;
    for (std::int64_t start = 0; start < n; start += size)
      sizes.push_back(std::min(size, n - start));
  }
  return split(tape, x, sizes, axis);
}

#define DISTOP_INSTANTIATE(T)                                                                      \
  template Var<T> concat(Tape&, const std::vector<Var<T>>&, int);                                  \
  template std::vector<Var<T>> split(Tape&, const Var<T>&, const std::vector<std::int64_t>&, int); \
  template std::vector<Var<T>> chunk(Tape&, const Var<T>&, std::int64_t, int);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
