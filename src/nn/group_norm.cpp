#include "distop/nn/group_norm.hpp"

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/group_norm.hpp"
#include "distop/kernels/layer_norm.hpp"

namespace distop::nn {

namespace {

// What one forward call shares with the normalisation.
struct Context {
  const char* name;
  Shape box;  // this rank's box as [n, C, s] (s the local spatial extents' product); n = 0: none
  std::int64_t groups;
  double eps;
  double count;  // the entries of a whole (sample, group): C / G times the global spatial extent
  // The ranks sharing each sample (MPI_COMM_NULL where every sample lies on one rank) and every
  // part's entries per (sample, group), in the communicator's order.
  MPI_Comm comm;
  std::vector<std::int64_t> counts;
};

// The statistics (mean, invstd) [n G, 2] of x [n, C, s]'s (sample, group) rows, their parts
// all-gathered over ctx.comm when the samples are split.
template <class T>
Tensor<double> group_stats(const Tensor<T>& x, const Context& ctx) {
  const std::int64_t rows = ctx.box[0] * ctx.groups;
  Tensor<double> stats(Shape{rows, 2}, "distop::group_norm_stats");
  if (rows == 0) return stats;
  const Shape row_shape{rows, ctx.box[1] / ctx.groups * ctx.box[2]};
  Tensor<double> moments(Shape{rows, 2}, "distop::group_norm_moments");
  kernels::layer_norm_moments(x.reshaped(row_shape), moments);
  if (ctx.comm == MPI_COMM_NULL) {
    kernels::layer_norm_stats(moments, {row_shape[1]}, ctx.eps, stats);
    return stats;
  }
  const auto parts = static_cast<std::int64_t>(ctx.counts.size());
  DISTOP_CHECK(2 * rows <= INT_MAX / parts, ctx.name, rows,
               " (sample, group) pairs exceed what one all-gather of their statistics can count");
  const int block = static_cast<int>(2 * rows);
  std::vector<int> counts(ctx.counts.size(), block), displs(ctx.counts.size());
  for (std::size_t q = 0; q < displs.size(); ++q) displs[q] = static_cast<int>(q) * block;
  Tensor<double> gathered(Shape{parts * 2 * rows}, "distop::group_norm_parts");
  comm::allgatherv(moments.data(), 2 * rows, gathered.data(), counts.data(), displs.data(),
                   ctx.comm);
  kernels::layer_norm_stats(gathered, ctx.counts, ctx.eps, stats);
  return stats;
}

// dst = beta dst + 0: a parameter gradient where this rank holds no box.
template <class T>
void zero_contribution(T beta, Tensor<T>& g) {
  if (beta == T(0) && g.numel() > 0) g.fill(T(0));
}

// Inputs: 0 x, then the weight (1) and the bias (2) where the layer is affine.
template <class T>
Var<T> normalize(Tape& tape, const Var<T>& x, const Var<T>& weight, const Var<T>& bias,
                 Context ctx) {
  auto compute = [&] {
    const Shape box = ctx.box;
    const bool has_data = box[0] > 0;
    const Tensor<T> w = weight.defined() ? weight.value().local() : Tensor<T>();
    const Tensor<T> b = bias.defined() ? bias.value().local() : Tensor<T>();
    const Tensor<T> xv = has_data ? x.value().local().reshaped(box) : Tensor<T>();
    Tensor<double> stats = group_stats(xv, ctx);
    auto y = DistTensor<T>::uninitialized(x.space());
    if (has_data) {
      Tensor<T> y3 = y.local().reshaped(box);
      kernels::group_norm_forward(xv, ctx.groups, stats, w, b, y3);
    }
    auto backward = [w, stats, box, has_data, groups = ctx.groups, count = ctx.count,
                     comm = ctx.comm](const DistTensor<T>& dy_t, Gradients<T>& grads) {
      const Tensor<T> dy = has_data ? dy_t.local().reshaped(box) : Tensor<T>();
      const Tensor<T> xin = has_data ? grads.input(0).value().local().reshaped(box) : Tensor<T>();
      if (grads.required(0)) {
        Tensor<double> sums(Shape{box[0] * groups, 2}, "distop::group_norm_grad_sums");
        if (has_data) {
          kernels::group_norm_backward_sums(dy, xin, groups, stats, w, sums);
          if (comm != MPI_COMM_NULL)
            comm::allreduce_sum(sums.data(), sums.data(), sums.numel(), comm);
        }
        grads.accumulate(0, [&](T beta, Tensor<T>& g) {
          if (!has_data) return;
          Tensor<T> g3 = g.reshaped(box);
          kernels::group_norm_backward_input(dy, xin, groups, stats, w, sums, count, beta, g3);
        });
      }
      // The parameters' gradients: this rank's box only (each copy its own component).
      if (grads.size() > 1) {
        grads.accumulate(1, [&](T beta, Tensor<T>& g) {
          if (has_data)
            kernels::group_norm_weight_grad(dy, xin, groups, stats, beta, g);
          else
            zero_contribution(beta, g);
        });
        grads.accumulate(2, [&](T beta, Tensor<T>& g) {
          if (has_data)
            kernels::group_norm_bias_grad(dy, beta, g);
          else
            zero_contribution(beta, g);
        });
      }
    };
    return Computed{std::move(y), std::move(backward)};
  };
  // Split samples: backward all-reduces its sums, so it runs on every rank sharing a sample.
  const FunctionOptions options{.collective = ctx.comm != MPI_COMM_NULL};
  if (weight.defined())
    return make_function<T>(tape, "group_norm", {x, weight, bias}, compute, options);
  return make_function<T>(tape, "group_norm", {x}, compute, options);
}

}  // namespace

template <class T>
GroupNorm<T>::GroupNorm(std::int64_t num_groups, std::int64_t num_channels,
                        GroupNormOptions options)
    : GroupNorm("GroupNorm", num_groups, num_channels, Partition::self(), options) {}

template <class T>
GroupNorm<T>::GroupNorm(std::int64_t num_groups, std::int64_t num_channels, Partition partition,
                        GroupNormOptions options)
    : GroupNorm("GroupNorm", num_groups, num_channels, std::move(partition), options) {}

template <class T>
GroupNorm<T>::GroupNorm(std::string name, std::int64_t num_groups, std::int64_t num_channels,
                        Partition partition, GroupNormOptions options)
    : name_(std::move(name)),
      groups_(num_groups),
      channels_(num_channels),
      options_(options),
      partition_(std::move(partition)) {
  const char* op = name_.c_str();
  DISTOP_CHECK(num_groups > 0 && num_channels > 0, op,
               "the group and channel counts must be positive, found ", num_groups, " groups and ",
               num_channels, " channels");
  DISTOP_CHECK(num_channels % num_groups == 0, op,
               "num_channels must be divisible by num_groups: ", num_channels,
               " channels do not fall into ", num_groups, " groups");
  DISTOP_CHECK(options_.eps > 0, op, "expected eps > 0, found ", options_.eps);
  if (options_.affine) {
    const TensorSpace space = detail::replicated(partition_, Shape{channels_});
    DistTensor<T> w(space);
    if (w.local_numel() > 0) w.local().fill(T(1));
    weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
    bias_ = this->register_parameter("bias", Var<T>(DistTensor<T>(space), true));
  }
}

template <class T>
Var<T>& GroupNorm<T>::weight() {
  DISTOP_CHECK(weight_.defined(), name_ + "::weight", "the layer is not affine");
  return weight_;
}
template <class T>
Var<T>& GroupNorm<T>::bias() {
  DISTOP_CHECK(bias_.defined(), name_ + "::bias", "the layer is not affine");
  return bias_;
}

template <class T>
Var<T> GroupNorm<T>::forward(Tape& tape, const Var<T>& x) {
  const char* op = name_.c_str();
  const trace::Compute span(op, this->registered_path());
  // Checks from metadata alone: they hold or fail alike on every rank.
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 3 && xs.rank() <= 5 && xs.global_shape()[1] == channels_, op,
               "expected an input [N, ", channels_, ", s_1..s_d] (d = 1 to 3), found ", xs.str());
  const Decomposition& dec = xs.decomposition();
  DISTOP_CHECK(dec.parts(1) == 1, op, "the channel axis of the input (", xs.str(),
               ") is split; the layer needs every channel of a sample on the rank holding it "
               "(split the batch or spatial axes instead)");
  std::vector<int> axes;  // the grid axes splitting spatial axes
  for (int a = 2; a < xs.rank(); ++a)
    if (dec.parts(a) > 1) axes.push_back(dec.split_by(a));
  std::sort(axes.begin(), axes.end());
  MPI_Comm comm = MPI_COMM_NULL;
  if (axes.empty()) {
    detail::check_input_ranks(xs, partition_, true, op);
  } else {
    DISTOP_CHECK(xs.partition().same_as(partition_), op, "the input (", xs.str(),
                 ") is split along spatial axes, so it must live on the layer's partition; it "
                 "lives on ",
                 xs.partition().str(), ", expected the layer's ", partition_.str());
    comm = partition_.axes_comm(axes);
  }

  const Shape& local = xs.local_shape();
  const std::int64_t per_group = channels_ / groups_;
  auto spatial = [&](const Shape& s) {
    std::int64_t v = 1;
    for (int a = 2; a < s.rank(); ++a) v *= s[a];
    return v;
  };
  Context ctx{op,
              local.numel() > 0 ? Shape{local[0], channels_, spatial(local)} : Shape{0, 0, 0},
              groups_,
              options_.eps,
              static_cast<double>(per_group * spatial(xs.global_shape())),
              comm,
              {}};
  if (comm != MPI_COMM_NULL) {
    // The communicator ranks the sharing ranks row-major by their coordinates along `axes`
    // (Partition::axes_comm): each part's entries per (sample, group), in that order.
    const Shape& grid = partition_.shape();
    std::int64_t parts = 1;
    for (int g : axes) parts *= grid[g];
    for (std::int64_t key = 0; key < parts; ++key) {
      std::vector<int> coords = partition_.coords();
      std::int64_t k = key;
      for (auto g = axes.rbegin(); g != axes.rend(); ++g) {
        coords[static_cast<std::size_t>(*g)] = static_cast<int>(k % grid[*g]);
        k /= grid[*g];
      }
      ctx.counts.push_back(per_group * spatial(xs.local_shape_at(coords)));
    }
  }
  return normalize(tape, x, weight_, bias_, std::move(ctx));
}

template <class T>
InstanceNorm<T>::InstanceNorm(std::int64_t num_features, InstanceNormOptions options)
    : InstanceNorm(num_features, Partition::self(), options) {}

template <class T>
InstanceNorm<T>::InstanceNorm(std::int64_t num_features, Partition partition,
                              InstanceNormOptions options)
    : GroupNorm<T>("InstanceNorm", num_features, num_features, std::move(partition),
                   GroupNormOptions{.eps = options.eps, .affine = options.affine}) {}

template class GroupNorm<float>;
template class GroupNorm<double>;
template class InstanceNorm<float>;
template class InstanceNorm<double>;

}  // namespace distop::nn
