#include "distop/nn/interpolate.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "common.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/core/trace.hpp"

namespace distop::nn {

void check_interpolate_options(const InterpolateOptions& o, const char* op) {
  DISTOP_CHECK(!o.align_corners.has_value() || kernels::is_linear(o.mode), op,
               "align_corners option can only be set with the interpolating modes: linear | "
               "bilinear | trilinear, not with '",
               kernels::interpolate_mode_name(o.mode), "'");
  DISTOP_CHECK(!(o.size.empty() && o.scale_factor.empty()), op,
               "either size or scale_factor should be defined");
  DISTOP_CHECK(o.size.empty() || o.scale_factor.empty(), op,
               "only one of size or scale_factor should be defined");
  DISTOP_CHECK(!(o.recompute_scale_factor && !o.size.empty()), op,
               "recompute_scale_factor is not meaningful with an explicit size");
  const std::size_t count = o.size.empty() ? o.scale_factor.size() : o.size.size();
  DISTOP_CHECK(count <= 3, op, "expected 1 to 3 ", o.size.empty() ? "scale factors" : "sizes",
               " (one for every spatial axis, or one per axis), found ", count);
  for (std::int64_t s : o.size.values)
    DISTOP_CHECK(s >= 1, op, "output sizes should be greater than 0, found size ", s);
  for (double s : o.scale_factor.values)
    DISTOP_CHECK(std::isfinite(s) && s > 0, op,
                 "scale factors should be positive finite numbers, found ", s);
}

namespace {

// [N, C, extents...] from a box [N, C, ...].
Shape planes_with(const Shape& box, const Shape& extents) {
  std::vector<std::int64_t> s{box[0], box[1]};
  s.insert(s.end(), extents.begin(), extents.end());
  return Shape(std::move(s));
}

Shape spatial_of(const Shape& s) {
  return Shape(std::vector<std::int64_t>(s.begin() + 2, s.end()));
}

constexpr const char* kBlocks = "interpolate";

// Checks x's and out_space's local boxes against g on this rank; returns whether the rank holds
// entries (and so computes).
template <class T>
bool check_boxes(const Var<T>& x, const kernels::InterpolateGeometry& g,
                 const TensorSpace& out_space) {
  const Shape& xb = x.space().local_shape();
  const Shape& yb = out_space.local_shape();
  if (!x.space().partition().active() || xb.numel() == 0) {
    DISTOP_CHECK(yb.numel() == 0, kBlocks, "this rank holds no input but an output box ", yb.str());
    return false;
  }
  g.validate(kBlocks);
  DISTOP_CHECK(xb.rank() == g.dims() + 2 && yb.rank() == g.dims() + 2, kBlocks,
               "expected an input and an output of rank ", g.dims() + 2,
               " ([N, C, spatial...]) for ", g.dims(), " spatial axes, found the boxes ", xb.str(),
               " and ", yb.str());
  DISTOP_CHECK(xb == planes_with(xb, g.in), kBlocks, "the input box ", xb.str(), " does not match ",
               g.str());
  DISTOP_CHECK(yb == planes_with(xb, g.out), kBlocks, "the output box ", yb.str(),
               " does not match ", planes_with(xb, g.out).str(), " (the input box ", xb.str(),
               " through ", g.str(), ")");
  return true;
}

}  // namespace

InterpolateMode parse_interpolate_mode(std::string_view name) {
  for (InterpolateMode m :
       {InterpolateMode::nearest, InterpolateMode::nearest_exact, InterpolateMode::linear,
        InterpolateMode::bilinear, InterpolateMode::trilinear})
    if (name == kernels::interpolate_mode_name(m)) return m;
  DISTOP_CHECK(false, "interpolate", "unknown mode '", std::string(name),
               "'; expected nearest, nearest-exact, linear, bilinear or trilinear (bicubic and "
               "area are not implemented)");
  return InterpolateMode::nearest;
}

std::vector<kernels::InterpolateAxis> interpolate_axes(const Shape& spatial,
                                                       const InterpolateOptions& options,
                                                       const char* op) {
  check_interpolate_options(options, op);
  const int d = spatial.rank();
  DISTOP_CHECK(d >= 1 && d <= 3, op,
               "expected an input [N, C, s_1..s_d] with 1 to 3 spatial axes, found ", d,
               " spatial axes");
  const int ld = kernels::linear_mode_dims(options.mode);
  DISTOP_CHECK(ld == 0 || ld == d, op, "got ", d + 2, "D input, but ",
               kernels::interpolate_mode_name(options.mode), " mode needs ", ld + 2, "D input");
  const bool by_size = !options.size.empty();
  const std::size_t count = by_size ? options.size.size() : options.scale_factor.size();
  DISTOP_CHECK(count == 1 || count == static_cast<std::size_t>(d), op, "expected 1 or ", d, " ",
               by_size ? "sizes" : "scale factors", " for an input with ", d,
               " spatial axes, found ", count);
  std::vector<kernels::InterpolateAxis> axes;
  for (int a = 0; a < d; ++a) {
    const auto u = count == 1 ? std::size_t{0} : static_cast<std::size_t>(a);
    kernels::InterpolateAxis ax;
    ax.in = spatial[a];
    DISTOP_CHECK(ax.in >= 1, op, "input sizes should be greater than 0, found ", spatial.str());
    if (by_size) {
      ax.out = options.size.values[u];
    } else {
      const double s = options.scale_factor.values[u];
      // torch: the output extent is the double n * scale converted to an integer (the floor).
      const double m = static_cast<double>(ax.in) * s;
      DISTOP_CHECK(m >= 1 && m < 9.0e18, op, "scale factor ", s, " along spatial axis ", a,
                   " turns ", ax.in, " inputs into ", std::floor(m),
                   " outputs; output sizes should be greater than 0");
      ax.out = static_cast<std::int64_t>(m);
      if (!options.recompute_scale_factor) ax.scale = s;
    }
    axes.push_back(ax);
  }
  return axes;
}

template <class T>
Var<T> interpolate_blocks(Tape& tape, const Var<T>& x, const kernels::InterpolateGeometry& g,
                          const TensorSpace& out_space) {
  return make_function<T>(tape, kBlocks, {x}, [&] {
    const bool active = check_boxes(x, g, out_space);
    auto y = DistTensor<T>::uninitialized(out_space);
    if (active) kernels::interpolate_forward(x.value().local(), y.local(), g);
    return Computed{std::move(y), [g, active](const DistTensor<T>& dy, Gradients<T>& grads) {
                      // Every rank adds a gradient (zero where it holds nothing), so that whether
                      // a Var has one is the same on all ranks (collective adjoints upstream).
                      if (!active) {
                        grads.input(0).grad();
                        return;
                      }
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        kernels::interpolate_backward(dy.local(), beta, dx, g);
                      });
                    }};
  });
}

namespace {

// The local layer's output space (x split along the batch and channel axes only) and geometry.
std::pair<TensorSpace, kernels::InterpolateGeometry> local_plan(const TensorSpace& in,
                                                                const InterpolateOptions& o,
                                                                const char* op) {
  DISTOP_CHECK(in.rank() >= 3 && in.rank() <= 5, op,
               "expected an input [N, C, s_1..s_d] with 1 to 3 spatial axes, found ", in.str());
  for (int a = 2; a < in.rank(); ++a)
    DISTOP_CHECK(in.decomposition().parts(a) == 1, op,
                 "a local interpolation takes inputs split along the batch and channel axes only "
                 "(DistributedInterpolate splits the spatial axes), found ",
                 in.str());
  auto axes = interpolate_axes(spatial_of(in.global_shape()), o, op);
  TensorSpace out = in;
  for (std::size_t a = 0; a < axes.size(); ++a)
    out = out.with_extent(static_cast<int>(a) + 2, axes[a].out);
  return {out, kernels::InterpolateGeometry::whole(o.mode, o.align_corners.value_or(false),
                                                   std::move(axes))};
}

}  // namespace

template <class T>
Var<T> interpolate(Tape& tape, const Var<T>& x, const InterpolateOptions& options) {
  const auto [out, g] = local_plan(x.space(), options, "interpolate");
  return interpolate_blocks(tape, x, g, out);
}

template <class T>
Interpolate<T>::Interpolate(InterpolateOptions options) : options_(std::move(options)) {
  check_interpolate_options(options_, "Interpolate");
}

template <class T>
TensorSpace Interpolate<T>::output_space(const TensorSpace& in) const {
  return local_plan(in, options_, "Interpolate").first;
}

template <class T>
Var<T> Interpolate<T>::forward(Tape& tape, const Var<T>& x) const {
  const trace::Compute span("Interpolate", this->registered_path());
  const auto [out, g] = local_plan(x.space(), options_, "Interpolate");
  return interpolate_blocks(tape, x, g, out);
}

#define DISTOP_INSTANTIATE(T)                                                                   \
  template Var<T> interpolate_blocks(Tape&, const Var<T>&, const kernels::InterpolateGeometry&, \
                                     const TensorSpace&);                                       \
  template Var<T> interpolate(Tape&, const Var<T>&, const InterpolateOptions&);                 \
  template class Interpolate<T>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
