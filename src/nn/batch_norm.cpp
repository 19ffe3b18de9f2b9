#include "distop/nn/batch_norm.hpp"

#include <cmath>
#include <utility>

#include "common.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/batch_norm.hpp"

namespace distop::nn {

namespace {

// What a layer's forward shares with the normalisation, for one call.
struct Context {
  const char* name;
  std::int64_t channels;
  const BatchNormOptions* options;
  bool training;
  // The communicator the statistics are all-sum-reduced over; MPI_COMM_NULL for statistics of the
  // local box alone (the local layer, and ranks outside a distributed layer's partition).
  MPI_Comm comm;
  // Whether this rank takes part in the statistics (holds a box, or is in the partition).
  bool participates;
  // The entries per channel the statistics are taken over.
  double count;
};

// A host vector of C values as a [C] tensor in the parameter's space, added to its gradient.
template <class T>
void add_param_grad(const Var<T>& p, const std::vector<double>& values) {
  std::vector<T> v(values.begin(), values.end());
  auto g = DistTensor<T>::uninitialized(p.space());
  g.local().copy_from(Tensor<T>::from_vector(g.local().shape(), v));
  p.accumulate_grad(std::move(g));
}

void sum_over(MPI_Comm comm, Tensor<double>& t) {
  if (comm != MPI_COMM_NULL) comm::allreduce_sum(t.data(), t.data(), t.numel(), comm);
}

template <class T>
Var<T> normalize(Tape& tape, const Var<T>& x, const Var<T>& weight, const Var<T>& bias,
                 DistTensor<T>& running_mean, DistTensor<T>& running_var, const Context& ctx) {
  auto compute = [&] {
    const std::int64_t C = ctx.channels;
    const auto c = static_cast<std::size_t>(C);
    const bool has_data = x.value().local_numel() > 0;
    const Tensor<T> w = weight.defined() ? weight.value().local() : Tensor<T>();
    const Tensor<T> b = bias.defined() ? bias.value().local() : Tensor<T>();
    const double eps = ctx.options->eps;
    Tensor<double> mean(Shape{C}, "distop::batch_norm_mean");
    Tensor<double> invstd(Shape{C}, "distop::batch_norm_invstd");
    auto y = DistTensor<T>::uninitialized(x.space());

    if (ctx.participates) {
      std::vector<double> m(c), inv(c);
      if (ctx.training) {
        DISTOP_CHECK(ctx.count > 1, ctx.name,
                     "expected more than 1 value per channel in training, found ", ctx.count,
                     " in ", x.space().str());
        // Two passes (the mean, then the squared deviations from it) rather than sums of
        // squares, which cancel when the mean is large against the spread.
        Tensor<double> sums(Shape{C}, "distop::batch_norm_sums");
        if (has_data) kernels::channel_sums(x.value().local(), sums);
        sum_over(ctx.comm, sums);
        const auto s = sums.to_vector();
        for (std::size_t k = 0; k < c; ++k) m[k] = s[k] / ctx.count;
        mean.copy_from(Tensor<double>::from_vector(Shape{C}, m));
        if (has_data) kernels::channel_squared_deviations(x.value().local(), mean, sums);
        sum_over(ctx.comm, sums);
        const auto sq = sums.to_vector();
        auto rm = running_mean.local().to_vector();
        auto rv = running_var.local().to_vector();
        const double mom = ctx.options->momentum;
        for (std::size_t k = 0; k < c; ++k) {
          inv[k] = 1.0 / std::sqrt(sq[k] / ctx.count + eps);
          rm[k] = static_cast<T>((1 - mom) * rm[k] + mom * m[k]);
          rv[k] = static_cast<T>((1 - mom) * rv[k] + mom * sq[k] / (ctx.count - 1));
        }
        running_mean.local().copy_from(Tensor<T>::from_vector(Shape{C}, rm));
        running_var.local().copy_from(Tensor<T>::from_vector(Shape{C}, rv));
      } else {
        const auto rm = running_mean.local().to_vector();
        const auto rv = running_var.local().to_vector();
        for (std::size_t k = 0; k < c; ++k) {
          m[k] = rm[k];
          inv[k] = 1.0 / std::sqrt(static_cast<double>(rv[k]) + eps);
        }
        mean.copy_from(Tensor<double>::from_vector(Shape{C}, m));
      }
      invstd.copy_from(Tensor<double>::from_vector(Shape{C}, inv));
      if (has_data) kernels::batch_norm_forward(x.value().local(), mean, invstd, w, b, y.local());
    }

    // Inputs: 0 x, then the weight and the bias (1 and 2) when the layer is affine.
    auto backward = [w, mean, invstd, has_data, C, training = ctx.training, comm = ctx.comm,
                     participates = ctx.participates,
                     count = ctx.count](const DistTensor<T>& dy_t, Gradients<T>& grads) {
      const Tensor<T>& dy = dy_t.local();
      const bool affine = grads.size() > 1;
      const bool need_w = affine && grads.required(1);
      const bool need_b = affine && grads.required(2);
      const bool need_x = grads.required(0);
      const Var<T>& xin = grads.input(0);
      Tensor<double> sums;  // empty: not needed
      if (participates && ((training && need_x) || need_w || need_b)) {
        sums = Tensor<double>(Shape{2, C}, "distop::batch_norm_grad_sums");
        if (has_data)
          kernels::batch_norm_backward_sums(dy, xin.value().local(), mean, invstd, sums);
        sum_over(comm, sums);
      }
      // Every rank adds a gradient (zero where it holds nothing) so that whether a Var has one is
      // the same on all ranks, which the adjoints of collective operations upstream rely on.
      if (need_w || need_b) {
        const auto s = sums.numel() > 0 ? sums.to_vector() : std::vector<double>();
        const auto part = [&](std::size_t row) {
          if (s.empty()) return std::vector<double>();
          const auto at =
              s.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(C));
          return std::vector<double>(at, at + C);
        };
        if (need_w) {
          if (participates)
            add_param_grad(grads.input(1), part(1));
          else
            grads.input(1).grad();
        }
        if (need_b) {
          if (participates)
            add_param_grad(grads.input(2), part(0));
          else
            grads.input(2).grad();
        }
      }
      if (need_x) {
        if (!has_data) {
          xin.grad();
          return;
        }
        const Tensor<double> batch_sums = training ? sums : Tensor<double>();
        grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
          kernels::batch_norm_backward_input(dy, xin.value().local(), mean, invstd, w, batch_sums,
                                             count, beta, dx);
        });
      }
    };
    return Computed{std::move(y), std::move(backward)};
  };
  // A distributed layer's backward all-reduces its sums: collective (it then runs with a zero
  // gradient where y has none).
  const FunctionOptions options{.collective = ctx.comm != MPI_COMM_NULL};
  if (weight.defined())
    return make_function<T>(tape, "batch_norm", {x, weight, bias}, compute, options);
  return make_function<T>(tape, "batch_norm", {x}, compute, options);
}

// Checks x against the layer: [N, C] or [N, C, s_1..s_d] with d <= 3, the channel axis unsplit.
void check_input(const TensorSpace& xs, std::int64_t channels, const char* op) {
  DISTOP_CHECK(xs.rank() >= 2 && xs.rank() <= 5 && xs.global_shape()[1] == channels &&
                   xs.decomposition().parts(1) == 1,
               op, "expected an input [N, ", channels, "] or [N, ", channels,
               ", s_1..s_d] (d <= 3) with the channel axis unsplit, found ", xs.str());
}

// The parameters and running statistics of a layer of `channels` over `partition`.
template <class T>
void init_state(std::int64_t channels, const BatchNormOptions& o, const Partition& partition,
                const char* op, Var<T>& weight, Var<T>& bias, DistTensor<T>& running_mean,
                DistTensor<T>& running_var) {
  DISTOP_CHECK(channels > 0, op, "the channel count must be positive, found ", channels);
  DISTOP_CHECK(o.eps > 0 && o.momentum >= 0 && o.momentum <= 1, op,
               "expected eps > 0 and momentum in [0, 1], found eps ", o.eps, " and momentum ",
               o.momentum);
  const TensorSpace space = detail::replicated(partition, Shape{channels});
  running_mean = DistTensor<T>(space);
  running_var = DistTensor<T>(space);
  if (running_var.local_numel() > 0) running_var.local().fill(T(1));
  if (o.affine) {
    DistTensor<T> w(space);
    if (w.local_numel() > 0) w.local().fill(T(1));
    weight = Var<T>(std::move(w), true);
    bias = Var<T>(DistTensor<T>(space), true);
  }
}

}  // namespace

template <class T>
BatchNorm<T>::BatchNorm(std::int64_t channels, BatchNormOptions options)
    : BatchNorm(channels, Partition::self(), options) {}

template <class T>
BatchNorm<T>::BatchNorm(std::int64_t channels, Partition partition, BatchNormOptions options)
    : channels_(channels), options_(options), partition_(std::move(partition)) {
  init_state(channels_, options_, partition_, "BatchNorm", weight_, bias_, running_mean_,
             running_var_);
  if (weight_.defined()) {
    this->register_parameter("weight", weight_);
    this->register_parameter("bias", bias_);
  }
  this->register_buffer("running_mean", running_mean_);
  this->register_buffer("running_var", running_var_);
  this->register_count("num_batches_tracked", batches_);
}

template <class T>
Var<T>& BatchNorm<T>::weight() {
  DISTOP_CHECK(weight_.defined(), "BatchNorm::weight", "the layer is not affine");
  return weight_;
}
template <class T>
Var<T>& BatchNorm<T>::bias() {
  DISTOP_CHECK(bias_.defined(), "BatchNorm::bias", "the layer is not affine");
  return bias_;
}

template <class T>
Var<T> BatchNorm<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("BatchNorm", this->registered_path());
  const TensorSpace& xs = x.space();
  check_input(xs, channels_, "BatchNorm");
  const bool has_data = x.value().local_numel() > 0;
  detail::check_input_ranks(xs, partition_, true, "BatchNorm");
  const Context ctx{"BatchNorm",
                    channels_,
                    &options_,
                    this->training(),
                    MPI_COMM_NULL,
                    has_data,
                    has_data ? static_cast<double>(xs.local_shape().numel() / channels_) : 0.0};
  if (this->training()) ++*batches_;
  return normalize(tape, x, weight_, bias_, running_mean_, running_var_, ctx);
}

template <class T>
DistributedBatchNorm<T>::DistributedBatchNorm(std::int64_t channels, Partition partition,
                                              BatchNormOptions options)
    : channels_(channels), options_(options), partition_(std::move(partition)) {
  init_state(channels_, options_, partition_, "DistributedBatchNorm", weight_, bias_, running_mean_,
             running_var_);
  if (weight_.defined()) {
    this->register_parameter("weight", weight_, GradientReduction::tied);
    this->register_parameter("bias", bias_, GradientReduction::tied);
  }
  this->register_buffer("running_mean", running_mean_);
  this->register_buffer("running_var", running_var_);
  this->register_count("num_batches_tracked", batches_);
}

template <class T>
Var<T>& DistributedBatchNorm<T>::weight() {
  DISTOP_CHECK(weight_.defined(), "DistributedBatchNorm::weight", "the layer is not affine");
  return weight_;
}
template <class T>
Var<T>& DistributedBatchNorm<T>::bias() {
  DISTOP_CHECK(bias_.defined(), "DistributedBatchNorm::bias", "the layer is not affine");
  return bias_;
}

template <class T>
Var<T> DistributedBatchNorm<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedBatchNorm", this->registered_path());
  constexpr const char* op = "DistributedBatchNorm";
  const TensorSpace& xs = x.space();
  check_input(xs, channels_, op);
  const double count = static_cast<double>(xs.global_shape().numel() / channels_);
  // On every rank alike, before any rank starts a collective.
  DISTOP_CHECK(!this->training() || count > 1, op,
               "expected more than 1 value per channel in training, ", "found ", count, " in ",
               xs.str());
  DISTOP_CHECK(xs.partition().same_as(partition_), op, "the input lives on ", xs.partition().str(),
               ", expected the layer's ", partition_.str());
  const Decomposition& dec = xs.decomposition();
  for (int g = 0; g < dec.grid().rank(); ++g)
    DISTOP_CHECK(dec.grid()[g] == 1 || !dec.replicates(g), op, "grid axis ", g,
                 " replicates the input (", xs.str(),
                 "): its copies would be counted more than once in the statistics");
  const Context ctx{
      op, channels_, &options_, this->training(), partition_.comm(), partition_.active(), count};
  if (this->training()) ++*batches_;
  return normalize(tape, x, weight_, bias_, running_mean_, running_var_, ctx);
}

template class BatchNorm<float>;
template class BatchNorm<double>;
template class DistributedBatchNorm<float>;
template class DistributedBatchNorm<double>;

}  // namespace distop::nn
