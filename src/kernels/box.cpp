#include "distop/kernels/box.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "box_runs.hpp"
#include "distop/core/error.hpp"
#include "host/fast_path.hpp"
#include "space.hpp"

// The box kernels: each entry point checks its arguments, calls its host fast path
// (host/box.cpp: run by run on the host) once, and runs the portable form, a Kokkos loop with a
// work item per entry that reads its run's start from a BoxPlan's View, where that returns false
// (always in a device build, with DISTOP_ENABLE_HOST_KERNELS=OFF or DISTOP_HOST_KERNELS=off).

namespace distop {

namespace kernels {

using box_detail::check_box;
using box_detail::packed_like;
using box_detail::row_start;
using box_detail::runs_of;

BoxPlan::BoxPlan(const Shape& shape, const Box& box)
    : shape_(shape), box_(box), runs_(runs_of(shape, box, "BoxPlan")), packed_(packed_like(runs_)) {
  Kokkos::View<std::int64_t*, MemSpace> starts(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "distop::BoxPlan::starts"),
      static_cast<std::size_t>(box.empty() ? 0 : runs_.rows));
  auto h = Kokkos::create_mirror_view(starts);
  for (std::size_t i = 0; i < h.extent(0); ++i)
    h(i) = row_start(runs_, static_cast<std::int64_t>(i));
  Kokkos::deep_copy(starts, h);
  starts_ = starts;
}

namespace {

void check_plan(const Shape& shape, const BoxPlan& plan, const char* op) {
  DISTOP_CHECK(shape == plan.shape(), op, "a plan of box ", plan.box().str(), " in shape ",
               plan.shape().str(), " used on a tensor of shape ", shape.str());
}

void check_copy(const void* src, const BoxPlan& src_plan, const void* dst,
                const BoxPlan& dst_plan) {
  DISTOP_CHECK(src_plan.box().extent == dst_plan.box().extent, "copy_box", "boxes ",
               src_plan.box().str(), " and ", dst_plan.box().str(), " differ in extent");
  DISTOP_CHECK(src != dst || src_plan.empty(), "copy_box",
               "a copy through plans between boxes of one tensor");
}

}  // namespace

namespace portable {

template <class T>
void pack(const Tensor<T>& src, const BoxPlan& plan, T* out) {
  check_plan(src.shape(), plan, "pack");
  if (plan.empty()) return;
  const T* s = src.data();
  const auto starts = plan.run_starts();
  const std::int64_t run = plan.run();
  Kokkos::parallel_for(
      "distop::pack", Kokkos::RangePolicy<ExecSpace>(0, plan.numel()),
      KOKKOS_LAMBDA(std::int64_t k) { out[k] = s[starts(k / run) + k % run]; });
}

template <class T>
void unpack(const T* in, const BoxPlan& plan, Tensor<T>& dst, bool accumulate) {
  check_plan(dst.shape(), plan, "unpack");
  if (plan.empty()) return;
  T* d = dst.data();
  const auto starts = plan.run_starts();
  const std::int64_t run = plan.run();
  Kokkos::parallel_for(
      "distop::unpack", Kokkos::RangePolicy<ExecSpace>(0, plan.numel()),
      KOKKOS_LAMBDA(std::int64_t k) {
        const auto o = starts(k / run) + k % run;
        d[o] = accumulate ? d[o] + in[k] : in[k];
      });
}

template <class T>
void fill_box(Tensor<T>& t, const BoxPlan& plan, T value) {
  check_plan(t.shape(), plan, "fill_box");
  if (plan.empty()) return;
  T* d = t.data();
  const auto starts = plan.run_starts();
  const std::int64_t run = plan.run();
  Kokkos::parallel_for(
      "distop::fill_box", Kokkos::RangePolicy<ExecSpace>(0, plan.numel()),
      KOKKOS_LAMBDA(std::int64_t k) { d[starts(k / run) + k % run] = value; });
}

template <class T>
void copy_box(const Tensor<T>& src, const BoxPlan& src_plan, Tensor<T>& dst,
              const BoxPlan& dst_plan, bool accumulate) {
  check_plan(src.shape(), src_plan, "copy_box");
  check_plan(dst.shape(), dst_plan, "copy_box");
  check_copy(src.data(), src_plan, dst.data(), dst_plan);
  if (src_plan.empty()) return;
  const T* s = src.data();
  T* d = dst.data();
  const auto ss = src_plan.run_starts();
  const auto ds = dst_plan.run_starts();
  const std::int64_t sr = src_plan.run();
  const std::int64_t dr = dst_plan.run();
  Kokkos::parallel_for(
      "distop::copy_box", Kokkos::RangePolicy<ExecSpace>(0, src_plan.numel()),
      KOKKOS_LAMBDA(std::int64_t k) {
        const auto o = ds(k / dr) + k % dr;
        const T v = s[ss(k / sr) + k % sr];
        d[o] = accumulate ? d[o] + v : v;
      });
}

}  // namespace portable

template <class T>
void pack(const Tensor<T>& src, const BoxPlan& plan, T* out) {
  check_plan(src.shape(), plan, "pack");
  if (plan.empty()) return;
  if (host_fast_path::copy_runs(plan.packed_runs(), out, plan.runs(), src.data(), false)) return;
  portable::pack(src, plan, out);
}

template <class T>
void unpack(const T* in, const BoxPlan& plan, Tensor<T>& dst, bool accumulate) {
  check_plan(dst.shape(), plan, "unpack");
  if (plan.empty()) return;
  if (host_fast_path::copy_runs(plan.runs(), dst.data(), plan.packed_runs(), in, accumulate))
    return;
  portable::unpack(in, plan, dst, accumulate);
}

template <class T>
void fill_box(Tensor<T>& t, const BoxPlan& plan, T value) {
  check_plan(t.shape(), plan, "fill_box");
  if (plan.empty()) return;
  if (host_fast_path::fill_runs(plan.runs(), t.data(), value)) return;
  portable::fill_box(t, plan, value);
}

template <class T>
void copy_box(const Tensor<T>& src, const BoxPlan& src_plan, Tensor<T>& dst,
              const BoxPlan& dst_plan, bool accumulate) {
  check_plan(src.shape(), src_plan, "copy_box");
  check_plan(dst.shape(), dst_plan, "copy_box");
  check_copy(src.data(), src_plan, dst.data(), dst_plan);
  if (src_plan.empty()) return;
  if (host_fast_path::copy_box(src.shape(), src_plan.box(), src.data(), dst.shape(), dst_plan.box(),
                               dst.data(), accumulate))
    return;
  portable::copy_box(src, src_plan, dst, dst_plan, accumulate);
}

// The Box-taking forms: the portable form describes the box in a plan of its own on every call.

template <class T>
void pack(const Tensor<T>& src, const Box& box, T* out) {
  const auto r = runs_of(src.shape(), box, "pack");
  if (box.empty()) return;
  if (host_fast_path::copy_runs(packed_like(r), out, r, src.data(), false)) return;
  portable::pack(src, BoxPlan(src.shape(), box), out);
}

template <class T>
void unpack(const T* in, const Box& box, Tensor<T>& dst, bool accumulate) {
  const auto r = runs_of(dst.shape(), box, "unpack");
  if (box.empty()) return;
  if (host_fast_path::copy_runs(r, dst.data(), packed_like(r), in, accumulate)) return;
  portable::unpack(in, BoxPlan(dst.shape(), box), dst, accumulate);
}

template <class T>
void copy_box(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
              bool accumulate) {
  DISTOP_CHECK(src_box.extent == dst_box.extent, "copy_box", "boxes ", src_box.str(), " and ",
               dst_box.str(), " differ in extent");
  check_box(src.shape(), src_box, "copy_box");
  check_box(dst.shape(), dst_box, "copy_box");
  if (src_box.empty()) return;
  if (host_fast_path::copy_box(src.shape(), src_box, src.data(), dst.shape(), dst_box, dst.data(),
                               accumulate))
    return;
  if (src.data() != dst.data()) {
    portable::copy_box(src, BoxPlan(src.shape(), src_box), dst, BoxPlan(dst.shape(), dst_box),
                       accumulate);
    return;
  }
  // Two boxes of one tensor may overlap: staged through a buffer.
  auto tmp = Tensor<T>::uninitialized(Shape{src_box.numel()});
  pack(src, src_box, tmp.data());
  unpack(tmp.data(), dst_box, dst, accumulate);
}

template <class T>
void fill_box(Tensor<T>& t, const Box& box, T value) {
  const auto r = runs_of(t.shape(), box, "fill_box");
  if (box.empty()) return;
  if (host_fast_path::fill_runs(r, t.data(), value)) return;
  portable::fill_box(t, BoxPlan(t.shape(), box), value);
}

#define DISTOP_INSTANTIATE_PLAN(T)                                                               \
  template void pack(const Tensor<T>&, const BoxPlan&, T*);                                      \
  template void unpack(const T*, const BoxPlan&, Tensor<T>&, bool);                              \
  template void fill_box(Tensor<T>&, const BoxPlan&, T);                                         \
  template void copy_box(const Tensor<T>&, const BoxPlan&, Tensor<T>&, const BoxPlan&, bool);    \
  template void portable::pack(const Tensor<T>&, const BoxPlan&, T*);                            \
  template void portable::unpack(const T*, const BoxPlan&, Tensor<T>&, bool);                    \
  template void portable::fill_box(Tensor<T>&, const BoxPlan&, T);                               \
  template void portable::copy_box(const Tensor<T>&, const BoxPlan&, Tensor<T>&, const BoxPlan&, \
                                   bool);
DISTOP_INSTANTIATE_PLAN(float)
DISTOP_INSTANTIATE_PLAN(double)
#undef DISTOP_INSTANTIATE_PLAN

#define DISTOP_INSTANTIATE(T)                                                         \
  template void pack(const Tensor<T>&, const Box&, T*);                               \
  template void unpack(const T*, const Box&, Tensor<T>&, bool);                       \
  template void copy_box(const Tensor<T>&, const Box&, Tensor<T>&, const Box&, bool); \
  template void fill_box(Tensor<T>&, const Box&, T);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace kernels
}  // namespace distop
