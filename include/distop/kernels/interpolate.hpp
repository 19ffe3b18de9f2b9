#pragma once
// Interpolation (torch.nn.functional.interpolate's nearest, nearest-exact and linear modes) over
// the d = 1, 2 or 3 trailing spatial axes of a local tensor [N, C, s_1..s_d], and its adjoint.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/core/tensor.hpp"

namespace distop::kernels {

// torch's modes: nearest, nearest-exact, and the linear family (linear for d = 1, bilinear for
// d = 2, trilinear for d = 3: one rule, applied along every axis).
enum class InterpolateMode { nearest, nearest_exact, linear, bilinear, trilinear };

// torch's name of the mode ("nearest", "nearest-exact", "linear", "bilinear", "trilinear").
const char* interpolate_mode_name(InterpolateMode mode) noexcept;
// Whether the mode interpolates linearly (and so takes align_corners).
constexpr bool is_linear(InterpolateMode mode) noexcept {
  return mode == InterpolateMode::linear || mode == InterpolateMode::bilinear ||
         mode == InterpolateMode::trilinear;
}
// The number of spatial axes a linear mode belongs to (1, 2, 3), 0 for the nearest modes (any).
constexpr int linear_mode_dims(InterpolateMode mode) noexcept {
  return mode == InterpolateMode::linear      ? 1
         : mode == InterpolateMode::bilinear  ? 2
         : mode == InterpolateMode::trilinear ? 3
                                              : 0;
}

// One spatial axis of an interpolation, in global indices: n inputs, m outputs, and the scale
// factor torch was given on this axis (0: none, the output size was given or recomputed).
struct InterpolateAxis {
  std::int64_t in = 1;   // n
  std::int64_t out = 1;  // m
  double scale = 0;
  friend bool operator==(const InterpolateAxis&, const InterpolateAxis&) = default;
};

// The inputs output o reads along one axis, with their weights: y_o = w0 x_i0 + w1 x_i1 (the
// nearest modes: i1 = i0, w0 = 1, w1 = 0). Global indices.
template <class T>
struct InterpolateTaps {
  std::int64_t i0 = 0, i1 = 0;
  T w0 = T(1), w1 = T(0);
};

// torch's index rule (ATen/native/UpSample.h, the CPU kernels) for output o in [0, m):
//   nearest:        o where m == n; o >> 1 where m == 2 n; else min(floorf(o * s), n - 1) in float,
//                   s = float(1 / scale) with a scale, float(n) / m without (nearest_idx);
//   nearest-exact:  min(floorf(float((o + 0.5) * s)), n - 1), s as for nearest;
//   linear:         where m == n the copy (i0 = i1 = o, weights 1, 0); else in T (torch's opmath
//                   type for float and double), r = (n - 1) / (m - 1) with align_corners (0 where
//                   m == 1), else 1 / scale with a scale and n / m without; the real source index
//                   x = r o with align_corners, else max(r (o + 0.5) - 0.5, 0); i0 = min(trunc x,
//                   n - 1), i1 = i0 + 1 (i0 where i0 = n - 1), w1 = clamp(x - i0, 0, 1),
//                   w0 = 1 - w1.
// The indices are nondecreasing in o. Error for o outside [0, m) or extents below 1.
template <class T>
InterpolateTaps<T> interpolate_taps(const InterpolateAxis& axis, InterpolateMode mode,
                                    bool align_corners, std::int64_t o);

// Where each output of a local interpolation reads its input. The rule is the global one of
// `axes` (one per spatial axis); the local input array holds the global entries [in_begin[a],
// in_begin[a] + in[a]) along axis a and the local outputs are the global outputs [out_begin[a],
// out_begin[a] + out[a]). An ordinary (one-rank) interpolation has in_begin = out_begin = 0 and
// the global extents; a distributed layer runs the same kernels on a rank's halo-padded block and
// its share of the outputs, so every output equals the one-rank output of the same global index.
struct InterpolateGeometry {
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;
  std::vector<InterpolateAxis> axes;
  std::vector<std::int64_t> in_begin;
  std::vector<std::int64_t> out_begin;
  Shape in;   // local input spatial extents
  Shape out;  // local output spatial extents

  int dims() const noexcept { return static_cast<int>(axes.size()); }
  std::string str() const;

  // The whole interpolation on one rank: in_begin = out_begin = 0, in and out the global extents.
  static InterpolateGeometry whole(InterpolateMode mode, bool align_corners,
                                   std::vector<InterpolateAxis> axes);
  // Checks the fields: 1-3 axes, a linear mode of as many axes as there are (torch's rule),
  // align_corners only with a linear mode, extents at least 1 and the local outputs inside
  // [0, m). An Error naming `where` otherwise. (That every input the outputs read lies inside the
  // local array the kernels check too, with T's arithmetic.)
  void validate(const char* where) const;
};

// x [N, C, g.in...] -> y [N, C, g.out...]: y at output (o_1..o_d) is, for the nearest modes, x at
// (i0_1..i0_d), and for the linear modes the weighted sum over the 2^d corners, nested as torch's
// CPU kernel (outermost axis first: sum_j w_j (inner sum at i_j)), computed in T. Overwrites y.
template <class T>
void interpolate_forward(const Tensor<T>& x, Tensor<T>& y, const InterpolateGeometry& g);

// dx = beta dx + the adjoint of interpolate_forward applied to dy: each input entry gathers
// w_1 .. w_d dy over every output (and corner) that reads it. One work item per input entry, its
// sum in a fixed order (deterministic, no atomics); entries no output reads get beta dx.
template <class T>
void interpolate_backward(const Tensor<T>& dy, T beta, Tensor<T>& dx, const InterpolateGeometry& g);

}  // namespace distop::kernels
