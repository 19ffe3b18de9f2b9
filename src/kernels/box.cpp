#include "distop/kernels/box.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>

#include "box_simd.hpp"
#include "distop/core/error.hpp"
#include "runs.hpp"
#include "space.hpp"

namespace distop {

namespace kernels {

namespace {

// A box seen as `rows` runs of `run` contiguous elements (kernels/box.hpp).
using Runs = detail::BoxRuns;

void check_box(const Shape& shape, const Box& box, const char* op) {
  DISTOP_CHECK(box.rank() == shape.rank(), op, "box ", box.str(), " of rank ", box.rank(),
               " in a tensor of rank ", shape.rank());
  for (int a = 0; a < shape.rank(); ++a)
    DISTOP_CHECK(box.offset[a] >= 0 && box.extent[a] >= 0 &&
                     box.offset[a] + box.extent[a] <= shape[a],
                 op, "box ", box.str(), " does not lie inside a tensor of shape ", shape.str());
}

// The number of leading axes iterated over: the trailing axes the box spans whole merge with the
// first one (from the inside) it does not span whole into one run.
int iterated_axes(const Shape& shape, const Box& box) {
  int inner = shape.rank();
  while (inner > 0) {
    const int a = inner - 1;
    --inner;
    if (box.extent[a] != shape[a]) break;
  }
  return inner;
}

// The runs with axes [0, inner) iterated over and the rest merged (inner at most
// iterated_axes(shape, box), so that the merged axes are contiguous).
Runs runs_with(const Shape& shape, const Box& box, int inner) {
  const auto strides = shape.strides();
  Runs r;
  r.base = 0;
  for (int a = 0; a < shape.rank(); ++a) r.base += box.offset[a] * strides[a];
  if (box.numel() == 0) return r;
  r.run = 1;
  for (int a = inner; a < shape.rank(); ++a) r.run *= box.extent[a];
  r.rows = 1;
  for (int a = 0; a < inner; ++a) {
    r.row_extent.push_back(box.extent[a]);
    r.row_stride.push_back(strides[a]);
    r.rows *= box.extent[a];
  }
  return r;
}

Runs runs_of(const Shape& shape, const Box& box, const char* op) {
  check_box(shape, box, op);
  return runs_with(shape, box, iterated_axes(shape, box));
}

// The tensor offset of run i.
[[maybe_unused]] inline std::int64_t row_start(const Runs& r, std::int64_t i) {
  std::int64_t off = r.base;
  for (int a = static_cast<int>(r.row_extent.size()) - 1; a >= 0; --a) {
    off += (i % r.row_extent[a]) * r.row_stride[a];
    i /= r.row_extent[a];
  }
  return off;
}

// Calls g(offset_a, offset_b, count, stride_a, stride_b) for every sweep of the innermost
// iterated axis (count runs, run i at offset_x + i stride_x), in row-major order, of two run
// structures with the same iterated extents (the same box in two tensors, or in a tensor and a
// packed buffer, see packed_like). The outer axes advance an odometer once per sweep.
template <class G>
void for_each_sweep(const Runs& ra, const Runs& rb, G&& g) {
  const int n = static_cast<int>(ra.row_extent.size());
  if (ra.rows == 0) return;
  if (n == 0) {
    g(ra.base, rb.base, std::int64_t{1}, std::int64_t{0}, std::int64_t{0});
    return;
  }
  const std::int64_t inner = ra.row_extent[static_cast<std::size_t>(n - 1)];
  const std::int64_t sa = ra.row_stride[static_cast<std::size_t>(n - 1)];
  const std::int64_t sb = rb.row_stride[static_cast<std::size_t>(n - 1)];
  const std::int64_t outer = ra.rows / inner;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n - 1), 0);
  std::int64_t oa = ra.base;
  std::int64_t ob = rb.base;
  for (std::int64_t o = 0; o < outer; ++o) {
    g(oa, ob, inner, sa, sb);
    for (int a = n - 2; a >= 0; --a) {
      const auto ua = static_cast<std::size_t>(a);
      oa += ra.row_stride[ua];
      ob += rb.row_stride[ua];
      if (++idx[ua] < ra.row_extent[ua]) break;
      oa -= ra.row_stride[ua] * ra.row_extent[ua];
      ob -= rb.row_stride[ua] * rb.row_extent[ua];
      idx[ua] = 0;
    }
  }
}

// Calls f(offset_a, offset_b) for every run, in row-major order (as for_each_sweep); the sweeps
// are tight strided loops.
template <class F>
void for_each_run2(const Runs& ra, const Runs& rb, F&& f) {
  for_each_sweep(ra, rb,
                 [&](std::int64_t pa, std::int64_t pb, std::int64_t count, std::int64_t sa,
                     std::int64_t sb) {
                   for (std::int64_t i = 0; i < count; ++i, pa += sa, pb += sb) f(pa, pb);
                 });
}

// The runs of a packed buffer laid out like r: run i at i * r.run.
Runs packed_like(const Runs& r) {
  Runs p = r;
  p.base = 0;
  std::int64_t stride = r.run;
  for (std::size_t a = r.row_extent.size(); a-- > 0;) {
    p.row_stride[a] = stride;
    stride *= r.row_extent[a];
  }
  return p;
}

using detail::add_run;
using detail::copy_run;

// Runs of this many bytes or more go to the vector sweeps (AVX-512 or AVX2) where the CPU has
// them: copies up to kSimdMemcpyRunBytes (a run of a page or more is memcpy's), sums of any
// length. A run of 128 bytes is then two AVX-512 copies where the portable pieces above take eight
// (1.3x on a box of such runs), and runs a page apart have their lines requested ahead (1.5x on
// runs of 1 KiB 4 KiB apart). Shorter runs stay with the portable pieces: a masked vector per run
// cost more than a move or two.
constexpr std::size_t kSimdRunBytes = 64;
constexpr std::size_t kSimdMemcpyRunBytes = 4096;

template <class T>
bool simd_sweeps_for(std::int64_t run, bool accumulate) {
  const auto bytes = static_cast<std::size_t>(run) * sizeof(T);
  return bytes >= kSimdRunBytes && (accumulate || bytes < kSimdMemcpyRunBytes) &&
         detail::simd_box_sweeps();
}

// d's runs (as ra) = s's runs (as rb), or += when accumulate; run entries each.
template <class T>
void copy_runs(const Runs& ra, T* d, const Runs& rb, const T* s, std::int64_t run,
               bool accumulate) {
  if (simd_sweeps_for<T>(run, accumulate)) {
    for_each_sweep(ra, rb,
                   [&](std::int64_t pa, std::int64_t pb, std::int64_t count, std::int64_t sa,
                       std::int64_t sb) {
                     if (accumulate)
                       detail::add_sweep(d + pa, sa, s + pb, sb, count, run);
                     else
                       detail::copy_sweep(d + pa, sa, s + pb, sb, count, run);
                   });
  } else if (accumulate) {
    for_each_run2(ra, rb, [&](std::int64_t pa, std::int64_t pb) { add_run(d + pa, s + pb, run); });
  } else {
    for_each_run2(ra, rb, [&](std::int64_t pa, std::int64_t pb) { copy_run(d + pa, s + pb, run); });
  }
}

}  // namespace

template <class T>
void pack(const Tensor<T>& src, const Box& box, T* out) {
  const auto r = runs_of(src.shape(), box, "pack");
  if (box.empty()) return;
  if constexpr (kHostKernels) {
    copy_runs(packed_like(r), out, r, src.data(), r.run, false);
  } else {
    portable::pack(src, BoxPlan(src.shape(), box), out);  // describes the box on the device
  }
}

template <class T>
void unpack(const T* in, const Box& box, Tensor<T>& dst, bool accumulate) {
  const auto r = runs_of(dst.shape(), box, "unpack");
  if (box.empty()) return;
  if constexpr (kHostKernels) {
    copy_runs(r, dst.data(), packed_like(r), in, r.run, accumulate);
  } else {
    portable::unpack(in, BoxPlan(dst.shape(), box), dst, accumulate);
  }
}

template <class T>
void copy_box(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
              bool accumulate) {
  DISTOP_CHECK(src_box.extent == dst_box.extent, "copy_box", "boxes ", src_box.str(), " and ",
               dst_box.str(), " differ in extent");
  // Run by run from one tensor into the other, no staging (the runs are those of the box in
  // whichever tensor merges fewer axes); staged through a buffer where the boxes may overlap.
  if (kHostKernels && src.data() != dst.data()) {
    check_box(src.shape(), src_box, "copy_box");
    check_box(dst.shape(), dst_box, "copy_box");
    if (src_box.empty()) return;
    const int inner =
        std::max(iterated_axes(src.shape(), src_box), iterated_axes(dst.shape(), dst_box));
    const auto rs = runs_with(src.shape(), src_box, inner);
    const auto rd = runs_with(dst.shape(), dst_box, inner);
    const T* s = src.data();
    T* d = dst.data();
    copy_runs(rd, d, rs, s, rs.run, accumulate);
  } else {
    if (src_box.empty()) return;
    auto tmp = Tensor<T>::uninitialized(Shape{src_box.numel()});
    pack(src, src_box, tmp.data());
    unpack(tmp.data(), dst_box, dst, accumulate);
  }
}

template <class T>
void fill_box(Tensor<T>& t, const Box& box, T value) {
  const auto r = runs_of(t.shape(), box, "fill_box");
  if (box.empty()) return;
  T* d = t.data();
  if constexpr (kHostKernels) {
    const std::int64_t run = r.run;
    for_each_run2(r, r, [&](std::int64_t off, std::int64_t) { std::fill(d + off, d + off + run, value); });
  } else {
    auto buf = Tensor<T>::uninitialized(Shape{box.numel()});
    buf.fill(value);
    unpack(buf.data(), box, t, false);
  }
}

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

void check_copy(const void* src, const BoxPlan& src_plan, const void* dst, const BoxPlan& dst_plan) {
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
  if constexpr (kHostKernels) {
    check_plan(src.shape(), plan, "pack");
    if (plan.empty()) return;
    copy_runs(plan.packed_runs(), out, plan.runs(), src.data(), plan.run(), false);
  } else {
    portable::pack(src, plan, out);
  }
}

template <class T>
void unpack(const T* in, const BoxPlan& plan, Tensor<T>& dst, bool accumulate) {
  if constexpr (kHostKernels) {
    check_plan(dst.shape(), plan, "unpack");
    if (plan.empty()) return;
    copy_runs(plan.runs(), dst.data(), plan.packed_runs(), in, plan.run(), accumulate);
  } else {
    portable::unpack(in, plan, dst, accumulate);
  }
}

template <class T>
void fill_box(Tensor<T>& t, const BoxPlan& plan, T value) {
  if constexpr (kHostKernels) {
    check_plan(t.shape(), plan, "fill_box");
    if (plan.empty()) return;
    T* d = t.data();
    const std::int64_t run = plan.run();
    for_each_run2(plan.runs(), plan.runs(),
                  [&](std::int64_t off, std::int64_t) { std::fill(d + off, d + off + run, value); });
  } else {
    portable::fill_box(t, plan, value);
  }
}

template <class T>
void copy_box(const Tensor<T>& src, const BoxPlan& src_plan, Tensor<T>& dst,
              const BoxPlan& dst_plan, bool accumulate) {
  if constexpr (kHostKernels) {
    check_plan(src.shape(), src_plan, "copy_box");
    check_plan(dst.shape(), dst_plan, "copy_box");
    check_copy(src.data(), src_plan, dst.data(), dst_plan);
    copy_box(src, src_plan.box(), dst, dst_plan.box(), accumulate);
  } else {
    portable::copy_box(src, src_plan, dst, dst_plan, accumulate);
  }
}

#define DISTOP_INSTANTIATE_PLAN(T)                                                           \
  template void pack(const Tensor<T>&, const BoxPlan&, T*);                                  \
  template void unpack(const T*, const BoxPlan&, Tensor<T>&, bool);                          \
  template void fill_box(Tensor<T>&, const BoxPlan&, T);                                     \
  template void copy_box(const Tensor<T>&, const BoxPlan&, Tensor<T>&, const BoxPlan&, bool); \
  template void portable::pack(const Tensor<T>&, const BoxPlan&, T*);                        \
  template void portable::unpack(const T*, const BoxPlan&, Tensor<T>&, bool);                \
  template void portable::fill_box(Tensor<T>&, const BoxPlan&, T);                           \
  template void portable::copy_box(const Tensor<T>&, const BoxPlan&, Tensor<T>&, const BoxPlan&, bool);
DISTOP_INSTANTIATE_PLAN(float)
DISTOP_INSTANTIATE_PLAN(double)
#undef DISTOP_INSTANTIATE_PLAN

#define DISTOP_INSTANTIATE(T)                                                              \
  template void pack(const Tensor<T>&, const Box&, T*);                                    \
  template void unpack(const T*, const Box&, Tensor<T>&, bool);                            \
  template void copy_box(const Tensor<T>&, const Box&, Tensor<T>&, const Box&, bool);      \
  template void fill_box(Tensor<T>&, const Box&, T);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace kernels
}  // namespace distop
