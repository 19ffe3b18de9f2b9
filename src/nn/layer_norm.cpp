#include "distop/nn/layer_norm.hpp"

#include <climits>
#include <utility>

#include "common.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/kernels/layer_norm.hpp"
#include "distop/nn/tensor_parallel.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

constexpr const char* kOp = "LayerNorm";

// What one forward call shares with the normalisation.
struct Context {
  std::int64_t rows;  // this rank's rows
  std::int64_t n;     // this rank's entries of each row
  std::int64_t dim;   // the entries of a whole row
  double eps;
  // The ranks sharing each row (MPI_COMM_NULL where a row lies on one rank) and every part's
  // entries per row, in the communicator's order.
  MPI_Comm comm;
  std::vector<std::int64_t> counts;
};

// The statistics (mean, invstd) [rows, 2] of x's rows [rows, n], their parts all-gathered over
// ctx.comm when the rows are split.
template <class T>
Tensor<double> row_stats(const Tensor<T>& x, const Context& ctx) {
  Tensor<double> stats(Shape{ctx.rows, 2}, "distop::layer_norm_stats");
  if (ctx.rows == 0) return stats;
  Tensor<double> moments(Shape{ctx.rows, 2}, "distop::layer_norm_moments");
  kernels::layer_norm_moments(x, moments);
  if (ctx.comm == MPI_COMM_NULL) {
    kernels::layer_norm_stats(moments, {ctx.n}, ctx.eps, stats);
    return stats;
  }
  const auto parts = static_cast<std::int64_t>(ctx.counts.size());
  DISTOP_CHECK(2 * ctx.rows <= INT_MAX / parts, kOp, ctx.rows,
               " rows exceed what one all-gather of the row statistics can count");
  const int block = static_cast<int>(2 * ctx.rows);
  std::vector<int> counts(ctx.counts.size(), block), displs(ctx.counts.size());
  for (std::size_t q = 0; q < displs.size(); ++q) displs[q] = static_cast<int>(q) * block;
  Tensor<double> gathered(Shape{parts * 2 * ctx.rows}, "distop::layer_norm_parts");
  comm::allgatherv(moments.data(), 2 * ctx.rows, gathered.data(), counts.data(), displs.data(),
                   ctx.comm);
  kernels::layer_norm_stats(gathered, ctx.counts, ctx.eps, stats);
  return stats;
}

// Inputs: 0 x, then the weight (1) and the bias (2) where the layer has them.
template <class T>
Var<T> normalize(Tape& tape, const Var<T>& x, const Var<T>& weight, const Var<T>& bias,
                 const Context& ctx) {
  auto compute = [&] {
    const Shape rows{ctx.rows, ctx.n};
    const Tensor<T> w = weight.defined() ? weight.value().local() : Tensor<T>();
    const Tensor<T> b = bias.defined() ? bias.value().local() : Tensor<T>();
    const Tensor<T> xv = x.value().local().reshaped(rows);
    Tensor<double> stats = row_stats(xv, ctx);
    auto y = DistTensor<T>::uninitialized(x.space());
    if (ctx.rows > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::layer_norm_forward(xv, stats, w, b, y2);
    }
    auto backward = [w, stats, rows, count = static_cast<double>(ctx.dim), comm = ctx.comm](
                        const DistTensor<T>& dy_t, Gradients<T>& grads) {
      const Tensor<T> dy = dy_t.local().reshaped(rows);
      const Tensor<T> xin = grads.input(0).value().local().reshaped(rows);
      const bool has_rows = rows[0] > 0;
      if (grads.required(0)) {
        Tensor<double> sums(Shape{rows[0], 2}, "distop::layer_norm_grad_sums");
        if (has_rows) {
          kernels::layer_norm_backward_sums(dy, xin, stats, w, sums);
          if (comm != MPI_COMM_NULL)
            comm::allreduce_sum(sums.data(), sums.data(), sums.numel(), comm);
        }
        grads.accumulate(0, [&](T beta, Tensor<T>& g) {
          if (!has_rows) return;
          Tensor<T> g2 = g.reshaped(rows);
          kernels::layer_norm_backward_input(dy, xin, stats, w, sums, count, beta, g2);
        });
      }
      // The parameters' gradients: this rank's rows only (each copy its own component).
      if (grads.size() > 1)
        grads.accumulate(1, [&](T beta, Tensor<T>& g) {
          kernels::layer_norm_weight_grad(dy, xin, stats, beta, g);
        });
      if (grads.size() > 2)
        grads.accumulate(2, [&](T beta, Tensor<T>& g) { kernels::sum_rows(dy, beta, g); });
    };
    return Computed{std::move(y), std::move(backward)};
  };
  // Split rows: backward all-reduces its sums, so it runs on every rank sharing a row.
  const FunctionOptions options{.collective = ctx.comm != MPI_COMM_NULL};
  if (bias.defined())
    return make_function<T>(tape, "layer_norm", {x, weight, bias}, compute, options);
  if (weight.defined()) return make_function<T>(tape, "layer_norm", {x, weight}, compute, options);
  return make_function<T>(tape, "layer_norm", {x}, compute, options);
}

// [D] on p, split over `axis` into `extents` (balanced when empty), replicated elsewhere.
TensorSpace parameter_space_of(std::int64_t dim, const Partition& p, int axis,
                               const std::vector<std::int64_t>& extents) {
  DISTOP_CHECK(axis >= -1 && axis < p.dim(), kOp, "split_axis ", axis,
               " is not -1 or a grid axis of ", p.str());
  if (axis < 0) return detail::replicated(p, Shape{dim});
  if (extents.empty())
    return TensorSpace(p, Decomposition::balanced(Shape{dim}, p.shape(), {axis}));
  std::int64_t total = 0;
  bool positive = true;
  for (auto e : extents) {
    total += e;
    positive = positive && e >= 1;
  }
  // Every block non-empty, as a Decomposition's are.
  DISTOP_CHECK(
      static_cast<std::int64_t>(extents.size()) == p.shape()[axis] && total == dim && positive, kOp,
      "split_extents ", Shape(extents).str(), " must be ", p.shape()[axis],
      " positive extents adding up to ", dim, " (grid axis ", axis, " of ", p.str(), ")");
  return TensorSpace(p, Decomposition::blocks(Shape{dim}, p.shape(), {extents}, {axis}));
}

}  // namespace

template <class T>
LayerNorm<T>::LayerNorm(std::int64_t dim, LayerNormOptions options)
    : LayerNorm(dim, Partition::self(), std::move(options)) {}

template <class T>
LayerNorm<T>::LayerNorm(std::int64_t dim, Partition partition, LayerNormOptions options)
    : dim_(dim), options_(std::move(options)), partition_(std::move(partition)) {
  DISTOP_CHECK(dim > 0, kOp, "the normalised size must be positive, found ", dim);
  DISTOP_CHECK(options_.eps > 0, kOp, "expected eps > 0, found ", options_.eps);
  param_space_ = parameter_space_of(dim_, partition_, options_.split_axis, options_.split_extents);
  if (options_.split_axis >= 0 && partition_.shape()[options_.split_axis] > 1)
    row_comm_ = partition_.axes_comm({options_.split_axis});
  if (options_.tie_axis >= 0) {
    DISTOP_CHECK(options_.tie_axis < partition_.dim() && options_.tie_axis != options_.split_axis,
                 kOp, "tie_axis ", options_.tie_axis, " is not a grid axis of ", partition_.str(),
                 " other than split_axis");
    if (partition_.shape()[options_.tie_axis] > 1)
      tie_ = std::make_shared<const AllSumReduce<T>>(param_space_,
                                                     std::vector<int>{options_.tie_axis});
  }
  if (options_.elementwise_affine) {
    DistTensor<T> w(param_space_);
    if (w.local_numel() > 0) w.local().fill(T(1));
    weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
    if (options_.bias)
      bias_ = this->register_parameter("bias", Var<T>(DistTensor<T>(param_space_), true));
  }
}

template <class T>
Var<T>& LayerNorm<T>::weight() {
  DISTOP_CHECK(weight_.defined(), "LayerNorm::weight", "the layer has no elementwise affine map");
  return weight_;
}
template <class T>
Var<T>& LayerNorm<T>::bias() {
  DISTOP_CHECK(bias_.defined(), "LayerNorm::bias", "the layer has no bias");
  return bias_;
}

template <class T>
Var<T> LayerNorm<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span(kOp, this->registered_path());
  const TensorSpace& xs = x.space();
  const int last = xs.rank() - 1;
  DISTOP_CHECK(xs.rank() >= 1 && xs.global_shape()[last] == dim_, kOp, "expected an input [..., ",
               dim_, "], found ", xs.str());
  if (options_.split_axis < 0) {
    DISTOP_CHECK(!detail::split(xs, last), kOp, "the normalised (last) axis is split in ", xs.str(),
                 "; give the layer the grid axis that splits it (split_axis)");
    detail::check_input_ranks(xs, partition_, true, kOp);
  } else {
    DISTOP_CHECK(xs.partition().same_as(partition_), kOp, "the input lives on ",
                 xs.partition().str(), ", expected the layer's ", partition_.str());
    DISTOP_CHECK(detail::same_blocks(xs, last, param_space_, 0), kOp,
                 "the normalised (last) axis of the input (", xs.str(),
                 ") must be split as the layer's parameters (", param_space_.str(), ")");
  }
  const Shape& box = xs.local_shape();
  Context ctx{1, box[last], dim_, options_.eps, row_comm_, {}};
  for (int a = 0; a < last; ++a) ctx.rows *= box[a];
  if (row_comm_ != MPI_COMM_NULL) {
    const auto& bounds = param_space_.decomposition().bounds(0);
    for (std::size_t q = 0; q + 1 < bounds.size(); ++q)
      ctx.counts.push_back(bounds[q + 1] - bounds[q]);
  }
  auto tied = [&](const Var<T>& p) {
    return tie_ && p.defined() ? tensor_parallel_copy(tape, p, tie_) : p;
  };
  return normalize(tape, x, tied(weight_), tied(bias_), ctx);
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace distop::nn
