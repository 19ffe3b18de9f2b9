#include <algorithm>
#include <cstdint>
#include <vector>

#include "../box_runs.hpp"
#include "box_simd.hpp"
#include "fast_path.hpp"
#include "runs.hpp"

#if DISTOP_HOST_KERNELS

// The host fast paths of the box kernels (box.cpp: pack, unpack, copy_box and fill_box, with and
// without a BoxPlan): run by run on the calling thread, the runs of the innermost iterated axis in
// tight strided sweeps, those of 64 bytes or more in AVX-512 or AVX2 vectors (box_simd.hpp), where
// the portable form is a Kokkos loop with a work item per entry that reads its run's start from
// the plan's View (and, without a plan, builds that View on every call).

namespace distop::kernels::host_fast_path {

namespace {

using box_detail::iterated_axes;
using box_detail::Runs;
using box_detail::runs_with;
using detail::add_run;
using detail::copy_run;

// Calls g(offset_a, offset_b, count, stride_a, stride_b) for every sweep of the innermost
// iterated axis (count runs, run i at offset_x + i stride_x), in row-major order, of two run
// structures with the same iterated extents (the same box in two tensors, or in a tensor and a
// packed buffer, see box_detail::packed_like). The outer axes advance an odometer once per sweep.
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
  for_each_sweep(
      ra, rb,
      [&](std::int64_t pa, std::int64_t pb, std::int64_t count, std::int64_t sa, std::int64_t sb) {
        for (std::int64_t i = 0; i < count; ++i, pa += sa, pb += sb) f(pa, pb);
      });
}

// Runs of this many bytes or more go to the vector sweeps (AVX-512 or AVX2) where the CPU has
// them: copies up to kSimdMemcpyRunBytes (a run of a page or more is memcpy's), sums of any
// length. A run of 128 bytes is then two AVX-512 copies where the portable pieces above take eight
// (1.3x on a box of such runs), and runs a page apart have their lines requested ahead (1.5x on
// runs of 1 KiB 4 KiB apart). Shorter runs stay with the pieces of copy_run: a masked vector per
// run cost more than a move or two.
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
void copy_runs_of(const Runs& ra, T* d, const Runs& rb, const T* s, std::int64_t run,
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
bool copy_runs(const detail::BoxRuns& dst_runs, T* d, const detail::BoxRuns& src_runs, const T* s,
               bool accumulate) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    copy_runs_of(dst_runs, d, src_runs, s, src_runs.run, accumulate);
    return true;
  }
}

template <class T>
bool copy_box(const Shape& src_shape, const Box& src_box, const T* s, const Shape& dst_shape,
              const Box& dst_box, T* d, bool accumulate) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    // Boxes of one tensor may overlap: the caller stages them through a buffer.
    if (!host_kernels_enabled() || s == d) return false;
    // Run by run from one tensor into the other, no staging: the runs are those of the box in
    // whichever tensor merges fewer axes.
    const int inner =
        std::max(iterated_axes(src_shape, src_box), iterated_axes(dst_shape, dst_box));
    const Runs rs = runs_with(src_shape, src_box, inner);
    const Runs rd = runs_with(dst_shape, dst_box, inner);
    copy_runs_of(rd, d, rs, s, rs.run, accumulate);
    return true;
  }
}

template <class T>
bool fill_runs(const detail::BoxRuns& runs, T* d, T value) {
  if constexpr (!kHostKernels) {
    return false;
  } else {
    if (!host_kernels_enabled()) return false;
    const std::int64_t run = runs.run;
    for_each_run2(runs, runs, [&](std::int64_t off, std::int64_t) {
      std::fill(d + off, d + off + run, value);
    });
    return true;
  }
}

#define DISTOP_INSTANTIATE_HOST_BOX(T)                                                            \
  template bool copy_runs(const detail::BoxRuns&, T*, const detail::BoxRuns&, const T*, bool);    \
  template bool copy_box(const Shape&, const Box&, const T*, const Shape&, const Box&, T*, bool); \
  template bool fill_runs(const detail::BoxRuns&, T*, T);
DISTOP_INSTANTIATE_HOST_BOX(float)
DISTOP_INSTANTIATE_HOST_BOX(double)
#undef DISTOP_INSTANTIATE_HOST_BOX

}  // namespace distop::kernels::host_fast_path

#endif  // DISTOP_HOST_KERNELS
