#pragma once
// Boxes of local tensors (core/box.hpp): packing them into contiguous buffers and back, the kernels
// behind every operator that moves part of a tensor (repartition, gather, scatter, halo exchange).

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/box.hpp"
#include "distop/core/tensor.hpp"

namespace distop {

namespace kernels {

// out[0 .. box.numel()) = src[box], row-major over the box. The box must lie inside src.
template <class T>
void pack(const Tensor<T>& src, const Box& box, T* out);
// dst[box] = in (or += in when accumulate).
template <class T>
void unpack(const T* in, const Box& box, Tensor<T>& dst, bool accumulate = false);
// dst[dst_box] = src[src_box] (or +=); the boxes have the same extents.
template <class T>
void copy_box(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
              bool accumulate = false);
// t[box] = value
template <class T>
void fill_box(Tensor<T>& t, const Box& box, T value);

namespace detail {
// A box seen as `rows` runs of `run` contiguous entries: the trailing axes the box covers whole
// merge into one run. Run i starts at base + sum over the iterated axes of index * stride.
struct BoxRuns {
  std::int64_t rows = 0;
  std::int64_t run = 0;
  std::int64_t base = 0;                 // offset of the box's first entry
  std::vector<std::int64_t> row_extent;  // extents of the axes iterated over (outer)
  std::vector<std::int64_t> row_stride;  // their strides in the tensor
};
}  // namespace detail

// A box of the tensors of one shape, described once for the kernels that pack it into a
// contiguous buffer, unpack it back and fill it: its runs, and the tensor offset of every run in
// a Kokkos View in MemSpace (device memory in a CUDA build). The operators that move boxes (halo
// exchange, repartition and the operators built on its plan) build one per box when they are
// built (nn::concat and nn::split keep theirs in a cache per shape and box); pack, unpack, fill and
// copy through a plan then allocate no Kokkos memory and copy nothing from the host, where the
// Box-taking forms above describe the box again (on the device, in a View of their own) on every
// call. Copies share the View. Not collective.
class BoxPlan {
 public:
  // An empty box of a rank-0 shape: the kernels do nothing.
  BoxPlan() = default;
  // Error unless the box lies inside the shape.
  BoxPlan(const Shape& shape, const Box& box);

  const Shape& shape() const noexcept { return shape_; }
  const Box& box() const noexcept { return box_; }
  std::int64_t numel() const noexcept { return runs_.rows * runs_.run; }
  bool empty() const noexcept { return numel() == 0; }
  // The box as rows() runs of run() contiguous entries, run i starting at run_starts()(i).
  std::int64_t rows() const noexcept { return runs_.rows; }
  std::int64_t run() const noexcept { return runs_.run; }
  const Kokkos::View<const std::int64_t*, MemSpace>& run_starts() const noexcept { return starts_; }
  const detail::BoxRuns& runs() const noexcept { return runs_; }
  // The same runs in a packed buffer (run i at i * run()).
  const detail::BoxRuns& packed_runs() const noexcept { return packed_; }

 private:
  Shape shape_;
  Box box_;
  detail::BoxRuns runs_;
  detail::BoxRuns packed_;
  Kokkos::View<const std::int64_t*, MemSpace> starts_;
};

// pack, unpack, fill_box and copy_box through plans: the same entries as the Box-taking forms,
// with no allocation (no staging either: copy is run by run from one tensor into the other, which
// must not share storage). The tensor's shape is the plan's (an Error otherwise); in copy the
// plans' boxes have the same extents.
template <class T>
void pack(const Tensor<T>& src, const BoxPlan& plan, T* out);
template <class T>
void unpack(const T* in, const BoxPlan& plan, Tensor<T>& dst, bool accumulate = false);
template <class T>
void fill_box(Tensor<T>& t, const BoxPlan& plan, T value);
template <class T>
void copy_box(const Tensor<T>& src, const BoxPlan& src_plan, Tensor<T>& dst,
              const BoxPlan& dst_plan, bool accumulate = false);

// The portable forms of the plan kernels: one work item per entry, reading the run starts from
// the plan's View; what a GPU runs. The plan-taking functions above call them where the kernels
// do not run on the host, or where the host fast paths are off (the build option
// DISTOP_ENABLE_HOST_KERNELS=OFF, or the environment variable DISTOP_HOST_KERNELS=off), and run
// the host's run-by-run copies otherwise; callable on any build, so that tests run them on the
// host.
namespace portable {
template <class T>
void pack(const Tensor<T>& src, const BoxPlan& plan, T* out);
template <class T>
void unpack(const T* in, const BoxPlan& plan, Tensor<T>& dst, bool accumulate = false);
template <class T>
void fill_box(Tensor<T>& t, const BoxPlan& plan, T value);
template <class T>
void copy_box(const Tensor<T>& src, const BoxPlan& src_plan, Tensor<T>& dst,
              const BoxPlan& dst_plan, bool accumulate = false);
}  // namespace portable

}  // namespace kernels
}  // namespace distop
