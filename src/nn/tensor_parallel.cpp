#include "distop/nn/tensor_parallel.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/core/random.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/functional.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "heads.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

// The number of ranks along grid axis `axis` of `p`, checked.
std::int64_t group_size(const Partition& p, int axis, const char* op) {
  DISTOP_CHECK(axis >= 0 && axis < p.dim(), op, "tensor_axis ", axis, " is not a grid axis of ",
               p.str());
  return p.shape()[axis];
}

// The check of a sequence axis (-1: none): another grid axis of `p` than the tensor axis.
void check_sequence_axis(const Partition& p, int sequence_axis, int tensor_axis, const char* op) {
  DISTOP_CHECK(sequence_axis == -1 ||
                   (sequence_axis >= 0 && sequence_axis < p.dim() && sequence_axis != tensor_axis),
               op, "sequence_axis ", sequence_axis, " is not a grid axis of ", p.str(),
               " other than the tensor axis ", tensor_axis, " (or -1)");
}

// The check of a tied input: on the layer's partition, no tensor axis split over the
// tensor-parallel grid axis (every rank of a group holds the same box), and `whole` axes unsplit.
void check_tied(const TensorSpace& xs, const Partition& p, int axis, std::vector<int> whole,
                const char* op) {
  DISTOP_CHECK(xs.partition().same_as(p), op, "the input lives on ", xs.partition().str(),
               ", expected the layer's ", p.str());
  bool ok = true;
  for (int a = 0; a < xs.rank(); ++a) ok = ok && xs.decomposition().split_by(a) != axis;
  for (int a : whole) ok = ok && !detail::split(xs, a);
  DISTOP_CHECK(ok, op, "the input (", xs.str(),
               ") must be replicated along the tensor-parallel grid axis ", axis,
               " (whole on every rank of a group) with its feature axis unsplit");
}

// The AllSumReduce over `axis` on `space`, kept while the space stays the same (collective over
// the partition when it is built: every rank sees the same spaces in the same order).
template <class T>
const std::shared_ptr<const AllSumReduce<T>>& group_sum_for(
    std::shared_ptr<const AllSumReduce<T>>& cache, const TensorSpace& space, int axis) {
  if (!cache || !(cache->domain() == space))
    cache = std::make_shared<const AllSumReduce<T>>(space, std::vector<int>{axis});
  return cache;
}

// p, or with a sequence axis f over it applied to p (its copies along the axis tied: each receives
// the whole gradient), the AllSumReduce kept in `cache`.
template <class T>
Var<T> tied(Tape& tape, const Var<T>& p, std::shared_ptr<const AllSumReduce<T>>& cache, int axis) {
  if (axis < 0 || !p.defined() || p.space().partition().shape()[axis] == 1) return p;
  return tensor_parallel_copy(tape, p, group_sum_for<T>(cache, p.space(), axis));
}

// [M, n] with the rows as `rows` (axis 0 of a space on the same partition) and n split in T equal
// blocks over grid axis `axis` (or whole when split is false).
TensorSpace rows_space(const TensorSpace& rows, std::int64_t n, int axis, bool split) {
  const Decomposition& d = rows.decomposition();
  const std::int64_t t = rows.partition().shape()[axis];
  std::vector<std::vector<std::int64_t>> extents{
      detail::block_extents(d)[0],
      split ? std::vector<std::int64_t>(t, n / t) : std::vector<std::int64_t>{n}};
  return TensorSpace(rows.partition(), Decomposition::blocks(Shape{d.global_shape()[0], n},
                                                             d.grid(), std::move(extents),
                                                             {d.axis_map()[0], split ? axis : -1}));
}

// y + b, or y for a layer without a bias.
template <class T>
Var<T> with_bias(Tape& tape, const Var<T>& y, const Var<T>& b) {
  return b.defined() ? add_bias(tape, y, b) : y;
}

}  // namespace

template <class T>
Var<T> tensor_parallel_copy(Tape& tape, const Var<T>& x,
                            const std::shared_ptr<const AllSumReduce<T>>& group_sum) {
  check_space(x.value(), group_sum->domain(), "tensor_parallel_copy", "the input");
  return make_function<T>(
      tape, "tensor_parallel_copy", {x},
      [&] {
        return Computed{x.value(), [group_sum](const DistTensor<T>& dy, Gradients<T>& grads) {
                          // B* = SumReduce onto the canonical copy, kept on every rank: A.
                          DistTensor<T> dx;
                          {
                            const timers::Scope timer(
                                timers::enabled() ? group_sum->name() + ".adjoint" : std::string());
                            dx = group_sum->apply_adjoint(dy);
                          }
                          grads.add(0, std::move(dx));
                        }};
      },
      FunctionOptions{.collective = true});
}

template <class T>
Var<T> tensor_parallel_reduce(Tape& tape, const Var<T>& z,
                              const std::shared_ptr<const AllSumReduce<T>>& group_sum) {
  check_space(z.value(), group_sum->domain(), "tensor_parallel_reduce", "the input");
  return make_function<T>(tape, "tensor_parallel_reduce", {z}, [&] {
    DistTensor<T> y;
    {
      const timers::Scope timer(timers::enabled() ? group_sum->name() : std::string());
      y = group_sum->apply(z.value());
    }
    // The adjoint, Broadcast from the canonical copy, moves nothing: the tied gradient is already
    // on every rank.
    return Computed{std::move(y),
                    [](const DistTensor<T>&, Gradients<T>& grads) { grads.add_output_grad(0); }};
  });
}

// ---- ColumnParallelLinear ----

template <class T>
ColumnParallelLinear<T>::ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features,
                                              Partition partition, ParallelLinearOptions options)
    : in_(in_features), out_(out_features), partition_(std::move(partition)), options_(options) {
  constexpr const char* op = "ColumnParallelLinear";
  const std::int64_t t = group_size(partition_, options_.tensor_axis, op);
  DISTOP_CHECK(in_ > 0 && out_ > 0 && out_ % t == 0, op, "out_features (", out_,
               ") must be a positive multiple of the ", t, " ranks along grid axis ",
               options_.tensor_axis, " of ", partition_.str(), ", and in_features (", in_,
               ") positive");
  const int axis = options_.tensor_axis;
  check_sequence_axis(partition_, options_.sequence_axis, axis, op);
  DistTensor<T> w(TensorSpace(
      partition_, Decomposition::balanced(Shape{out_, in_}, partition_.shape(), {axis, -1})));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  uniform_init(w, parameter_seed(options_.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
  if (options_.bias) {
    DistTensor<T> b(
        TensorSpace(partition_, Decomposition::balanced(Shape{out_}, partition_.shape(), {axis})));
    uniform_init(b, parameter_seed(options_.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(b), true));
  }
}

template <class T>
Var<T>& ColumnParallelLinear<T>::bias() {
  DISTOP_CHECK(bias_.defined(), "ColumnParallelLinear", "the layer was made without a bias");
  return bias_;
}

template <class T>
Var<T> ColumnParallelLinear<T>::forward(Tape& tape, const Var<T>& x) {
  constexpr const char* op = "ColumnParallelLinear";
  const trace::Compute span(op, this->registered_path());
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() == 2 && xs.global_shape()[1] == in_, op, "expected an input [M, ", in_,
               "], found ", xs.str());
  check_tied(xs, partition_, options_.tensor_axis, {1}, op);
  const auto& sum = group_sum_for<T>(group_sum_, xs, options_.tensor_axis);
  const Var<T> xf = tensor_parallel_copy(tape, x, sum);
  const int seq = options_.sequence_axis;
  return with_bias(tape,
                   matmul_nt(tape, xf, tied(tape, weight_, weight_tie_, seq),
                             rows_space(xs, out_, options_.tensor_axis, true)),
                   tied(tape, bias_, bias_tie_, seq));
}

// ---- RowParallelLinear ----

template <class T>
RowParallelLinear<T>::RowParallelLinear(std::int64_t in_features, std::int64_t out_features,
                                        Partition partition, ParallelLinearOptions options)
    : in_(in_features), out_(out_features), partition_(std::move(partition)), options_(options) {
  constexpr const char* op = "RowParallelLinear";
  const std::int64_t t = group_size(partition_, options_.tensor_axis, op);
  DISTOP_CHECK(in_ > 0 && out_ > 0 && in_ % t == 0, op, "in_features (", in_,
               ") must be a positive multiple of the ", t, " ranks along grid axis ",
               options_.tensor_axis, " of ", partition_.str(), ", and out_features (", out_,
               ") positive");
  const int axis = options_.tensor_axis;
  check_sequence_axis(partition_, options_.sequence_axis, axis, op);
  DistTensor<T> w(TensorSpace(
      partition_, Decomposition::balanced(Shape{out_, in_}, partition_.shape(), {-1, axis})));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  uniform_init(w, parameter_seed(options_.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
  if (options_.bias) {
    DistTensor<T> b(
        TensorSpace(partition_, Decomposition::balanced(Shape{out_}, partition_.shape(), {-1})));
    uniform_init(b, parameter_seed(options_.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(b), true));
  }
}

template <class T>
Var<T>& RowParallelLinear<T>::bias() {
  DISTOP_CHECK(bias_.defined(), "RowParallelLinear", "the layer was made without a bias");
  return bias_;
}

template <class T>
Var<T> RowParallelLinear<T>::forward(Tape& tape, const Var<T>& x) {
  constexpr const char* op = "RowParallelLinear";
  const trace::Compute span(op, this->registered_path());
  const TensorSpace& xs = x.space();
  const int axis = options_.tensor_axis;
  const std::int64_t t = partition_.shape()[axis];
  DISTOP_CHECK(xs.rank() == 2 && xs.global_shape()[1] == in_ && xs.partition().same_as(partition_),
               op, "expected an input [M, ", in_, "] on ", partition_.str(), ", found ", xs.str());
  DISTOP_CHECK(xs.decomposition().split_by(0) != axis &&
                   (t == 1 || (xs.decomposition().split_by(1) == axis &&
                               xs.decomposition().bounds(1) == balanced_bounds(in_, t))),
               op, "the input (", xs.str(), ") must have its feature axis split in ", t,
               " equal blocks over grid axis ", axis, " and its rows not split over it");
  const TensorSpace out = rows_space(xs, out_, axis, false);
  const int seq = options_.sequence_axis;
  // This rank's partial product.
  const Var<T> z = matmul_nt(tape, x, tied(tape, weight_, weight_tie_, seq), out);
  return with_bias(tape, tensor_parallel_reduce(tape, z, group_sum_for<T>(group_sum_, out, axis)),
                   tied(tape, bias_, bias_tie_, seq));
}

// ---- TensorParallelMultiheadAttention ----

template <class T>
TensorParallelMultiheadAttention<T>::TensorParallelMultiheadAttention(
    std::int64_t embed_dim, std::int64_t num_heads, Partition partition,
    TensorParallelMultiheadAttentionOptions options)
    : embed_dim_(embed_dim),
      num_heads_(num_heads),
      partition_(std::move(partition)),
      options_(options),
      calls_(std::make_shared<std::int64_t>(0)) {
  constexpr const char* op = "TensorParallelMultiheadAttention";
  const int axis = options_.tensor_axis;
  const std::int64_t t = group_size(partition_, axis, op);
  DISTOP_CHECK(embed_dim_ > 0 && num_heads_ > 0 && embed_dim_ % num_heads_ == 0, op,
               "embed_dim must be a positive multiple of num_heads, found ", embed_dim_, " and ",
               num_heads_);
  DISTOP_CHECK(num_heads_ % t == 0, op, "num_heads (", num_heads_, ") must be a multiple of the ",
               t, " ranks along grid axis ", axis, " of ", partition_.str());
  DISTOP_CHECK(options_.dropout >= 0.0 && options_.dropout <= 1.0, op,
               "dropout must lie in [0, 1], found ", options_.dropout);
  if (options_.sequence_parallel)
    check_sequence_axis(partition_, options_.sequence_parallel->sequence_axis, axis, op);
  const std::int64_t e = embed_dim_;
  // in_proj_weight as [3, E, E] (torch's [3E, E] in the same order), its rows axis split over the
  // tensor axis: rank t holds its heads' q, k and v rows. Each entry is drawn from its torch index
  // as MultiheadAttention draws it (xavier_uniform_ on [3E, E]).
  DistTensor<T> w(TensorSpace(
      partition_, Decomposition::balanced(Shape{3, e, e}, partition_.shape(), {-1, axis, -1})));
  {
    const std::uint64_t seed = parameter_seed(options_.seed, "in_proj_weight");
    const double bound = std::sqrt(6.0 / static_cast<double>(4 * e));
    const auto idx = w.space().global_indices();
    std::vector<T> v(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i)
      v[i] = static_cast<T>(
          bound * (2.0 * random::uniform(seed, static_cast<std::uint64_t>(idx[i])) - 1.0));
    w.local().copy_from(Tensor<T>::from_vector(w.space().local_shape(), v));
  }
  in_proj_weight_ = this->register_parameter("in_proj_weight", Var<T>(std::move(w), true),
                                             GradientReduction::per_replica, Shape{3 * e, e});
  DistTensor<T> b(TensorSpace(
      partition_, Decomposition::balanced(Shape{3, e}, partition_.shape(), {-1, axis})));
  in_proj_bias_ = this->register_parameter("in_proj_bias", Var<T>(std::move(b), true),
                                           GradientReduction::per_replica, Shape{3 * e});
  // The same boxes seen as the rows of one [3E, E] matrix (and [3E] vector) split in T blocks:
  // rank t's block is [q_t; k_t; v_t], the rows its projection multiplies by.
  in_proj_rows_ = TensorSpace(
      partition_, Decomposition::balanced(Shape{3 * e, e}, partition_.shape(), {axis, -1}));
  in_proj_bias_rows_ =
      TensorSpace(partition_, Decomposition::balanced(Shape{3 * e}, partition_.shape(), {axis}));
  out_proj_ = this->register_module(
      "out_proj",
      std::make_shared<RowParallelLinear<T>>(
          e, e, partition_,
          ParallelLinearOptions{.tensor_axis = axis,
                                .seed = parameter_seed(options_.seed, "out_proj"),
                                .sequence_axis = options_.sequence_parallel
                                                     ? options_.sequence_parallel->sequence_axis
                                                     : -1}));
  Kokkos::deep_copy(out_proj_->bias().value().local().view(), T(0));
  this->register_count("calls", calls_, /*persistent=*/false);
}

template <class T>
Var<T> TensorParallelMultiheadAttention<T>::forward(Tape& tape, const Var<T>& x,
                                                    const AttentionMask<T>& mask) {
  constexpr const char* op = "TensorParallelMultiheadAttention";
  const trace::Compute span(op, this->registered_path());
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() == 3 && xs.global_shape()[2] == embed_dim_, op,
               "expected an input [N, S, ", embed_dim_, "], found ", xs.str());
  const int axis = options_.tensor_axis;
  const auto& sp = options_.sequence_parallel;
  check_tied(xs, partition_, axis, sp ? std::vector<int>{2} : std::vector<int>{1, 2}, op);
  DISTOP_CHECK(!(sp && mask.attn_mask), op,
               "an additive attn_mask is not supported with sequence parallelism (is_causal is)");
  const std::int64_t t = partition_.shape()[axis];
  const std::int64_t s = xs.global_shape()[1];
  const std::int64_t d = head_dim();

  // f, then this rank's q, k and v rows: [N S, 3E] split in T boxes of [q_t k_t v_t] (the rows
  // block-major where the sequence is split).
  const Var<T> rows = detail::sequence_rows(
      tape, tensor_parallel_copy(tape, x, group_sum_for<T>(group_sum_, xs, axis)));
  const int seq = sp ? sp->sequence_axis : -1;
  const Var<T> weight = detail::view_as(tape, tied(tape, in_proj_weight_, weight_tie_, seq),
                                        in_proj_rows_, "in_proj_rows");
  const Var<T> bias = detail::view_as(tape, tied(tape, in_proj_bias_, bias_tie_, seq),
                                      in_proj_bias_rows_, "in_proj_rows");
  const Var<T> qkv = add_bias(
      tape, matmul_nt(tape, rows, weight, rows_space(rows.space(), 3 * embed_dim_, axis, true)),
      bias);
  // Heads [N, H, S, D]: the batch and the sequence as x's, the heads split over the axis.
  const Decomposition& xd = xs.decomposition();
  const auto xe = detail::block_extents(xd);
  const TensorSpace heads(
      partition_,
      Decomposition::blocks(Shape{xs.global_shape()[0], num_heads_, s, d}, xd.grid(),
                            {xe[0], std::vector<std::int64_t>(t, num_heads_ / t), xe[1], {d}},
                            {xd.axis_map()[0], axis, xd.parts(1) > 1 ? xd.axis_map()[1] : -1, -1}));
  const auto qkv_heads = detail::split_heads_to(tape, qkv, 3, heads);
  const bool drop = this->training() && options_.dropout > 0.0;
  const std::uint64_t drop_seed = drop ? random::bits(parameter_seed(options_.seed, "dropout"),
                                                      static_cast<std::uint64_t>((*calls_)++))
                                       : 0;

  Var<T> attended;
  if (sp) {
    if (!attention_ || !(attention_->space() == heads))
      attention_ = std::make_shared<const SequenceParallelAttention<T>>(heads, *sp);
    attended = attention_->forward(tape, qkv_heads[0], qkv_heads[1], qkv_heads[2],
                                   {.is_causal = mask.is_causal,
                                    .dropout = drop ? options_.dropout : 0.0,
                                    .dropout_seed = drop_seed});
  } else {  // attention of this rank's heads, as MultiheadAttention's
    attended = detail::attention(tape, qkv_heads[0], qkv_heads[1], qkv_heads[2], mask,
                                 1.0 / std::sqrt(static_cast<double>(d)),
                                 drop ? options_.dropout : 0.0, drop_seed);
  }
  const Var<T> merged =
      detail::merge_heads_to(tape, attended, rows_space(rows.space(), embed_dim_, axis, true));
  // out_proj: this rank's columns, g, the bias once.
  return detail::rows_to_sequences(tape, out_proj_->forward(tape, merged), xs);
}

// ---- TensorParallelMLP ----

namespace {

// linear2(dropout(gelu(linear1(x)))) on [M, E] or [N, S, E].
template <class T, class Middle>
Var<T> parallel_mlp(Tape& tape, const Var<T>& x, ColumnParallelLinear<T>& linear1,
                    RowParallelLinear<T>& linear2, const Middle& middle, const char* op) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() == 2 || xs.rank() == 3, op,
               "expected an input [M, E] or [N, S, E], found ", xs.str());
  if (xs.rank() == 2) return linear2.forward(tape, middle(linear1.forward(tape, x)));
  const Var<T> h = linear1.forward(tape, detail::sequence_rows(tape, x));
  if (!detail::split(xs, 1))
    return detail::rows_to_sequences(tape, linear2.forward(tape, middle(h)), xs);
  // A split sequence's rows are block-major; the middle (its dropout keyed by global index) sees
  // the hidden units as [N, S, F], whose global order is the one the rows of a whole sequence have.
  const TensorSpace& hs = h.space();
  const Decomposition& xd = xs.decomposition();
  const auto xe = detail::block_extents(xd);
  const TensorSpace seqs(
      hs.partition(),
      Decomposition::blocks(Shape{xs.global_shape()[0], xs.global_shape()[1], hs.global_shape()[1]},
                            xd.grid(), {xe[0], xe[1], detail::block_extents(hs.decomposition())[1]},
                            {-1, xd.axis_map()[1], hs.decomposition().split_by(1)}));
  const Var<T> m = detail::view_as(tape, middle(detail::view_as(tape, h, seqs, "hidden_units")), hs,
                                   "hidden_units");
  return detail::rows_to_sequences(tape, linear2.forward(tape, m), xs);
}

}  // namespace

template <class T>
TensorParallelMLP<T>::TensorParallelMLP(std::int64_t embed_dim, std::int64_t hidden,
                                        Partition partition, TensorParallelMLPOptions options)
    : options_(options) {
  const std::int64_t t = group_size(partition, options.tensor_axis, "TensorParallelMLP");
  DISTOP_CHECK(hidden > 0 && hidden % t == 0, "TensorParallelMLP", "hidden (", hidden,
               ") must be a positive multiple of the ", t, " ranks along grid axis ",
               options.tensor_axis, " of ", partition.str());
  linear1_ = this->register_module(
      "linear1", std::make_shared<ColumnParallelLinear<T>>(
                     embed_dim, hidden, partition,
                     ParallelLinearOptions{.tensor_axis = options.tensor_axis,
                                           .seed = parameter_seed(options.seed, "linear1"),
                                           .sequence_axis = options.sequence_axis}));
  linear2_ = this->register_module(
      "linear2", std::make_shared<RowParallelLinear<T>>(
                     hidden, embed_dim, std::move(partition),
                     ParallelLinearOptions{.tensor_axis = options.tensor_axis,
                                           .seed = parameter_seed(options.seed, "linear2"),
                                           .sequence_axis = options.sequence_axis}));
}

template <class T>
Var<T> TensorParallelMLP<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("TensorParallelMLP", this->registered_path());
  return parallel_mlp(
      tape, x, *linear1_, *linear2_,
      [&](const Var<T>& h) { return gelu(tape, h, options_.approximate); }, "TensorParallelMLP");
}

// ---- TensorParallelTransformerEncoderLayer ----

template <class T>
TensorParallelTransformerEncoderLayer<T>::TensorParallelTransformerEncoderLayer(
    std::int64_t d_model, std::int64_t nhead, std::int64_t dim_feedforward, Partition partition,
    TensorParallelTransformerEncoderLayerOptions options)
    : options_(options) {
  const std::uint64_t seed = options.seed;
  const int axis = options.tensor_axis;
  const int seq = options.sequence_parallel ? options.sequence_parallel->sequence_axis : -1;
  auto dropout = [&](const char* name) {
    return this->register_module(
        name, std::make_shared<Dropout<T>>(options.dropout,
                                           DropoutOptions{.seed = parameter_seed(seed, name)}));
  };
  // torch's registration order, TransformerEncoderLayer's seeds.
  self_attn_ = this->register_module(
      "self_attn",
      std::make_shared<TensorParallelMultiheadAttention<T>>(
          d_model, nhead, partition,
          TensorParallelMultiheadAttentionOptions{.tensor_axis = axis,
                                                  .dropout = options.dropout,
                                                  .seed = parameter_seed(seed, "self_attn"),
                                                  .sequence_parallel = options.sequence_parallel}));
  linear1_ = this->register_module(
      "linear1",
      std::make_shared<ColumnParallelLinear<T>>(
          d_model, dim_feedforward, partition,
          ParallelLinearOptions{
              .tensor_axis = axis, .seed = parameter_seed(seed, "linear1"), .sequence_axis = seq}));
  dropout_ = dropout("dropout");
  linear2_ = this->register_module(
      "linear2",
      std::make_shared<RowParallelLinear<T>>(
          dim_feedforward, d_model, partition,
          ParallelLinearOptions{
              .tensor_axis = axis, .seed = parameter_seed(seed, "linear2"), .sequence_axis = seq}));
  const LayerNormOptions norm{.eps = options.layer_norm_eps, .tie_axis = seq};
  // On the layer's partition, a copy on each rank (none on the ranks outside it).
  norm1_ = this->register_module("norm1", std::make_shared<LayerNorm<T>>(d_model, partition, norm));
  norm2_ = this->register_module("norm2", std::make_shared<LayerNorm<T>>(d_model, partition, norm));
  dropout1_ = dropout("dropout1");
  dropout2_ = dropout("dropout2");
}

template <class T>
Var<T> TensorParallelTransformerEncoderLayer<T>::forward(Tape& tape, const Var<T>& x,
                                                         const AttentionMask<T>& mask) {
  constexpr const char* op = "TensorParallelTransformerEncoderLayer";
  const trace::Compute span(op, this->registered_path());
  DISTOP_CHECK(x.space().rank() == 3 && !detail::split(x.space(), 2), op,
               "expected an input [N, S, E] with E whole, found ", x.space().str());
  const Var<T> h = add(
      tape, x, dropout1_->forward(tape, self_attn_->forward(tape, norm1_->forward(tape, x), mask)));
  const Var<T> f = parallel_mlp(
      tape, norm2_->forward(tape, h), *linear1_, *linear2_,
      [&](const Var<T>& u) { return dropout_->forward(tape, gelu(tape, u, options_.approximate)); },
      op);
  return add(tape, h, dropout2_->forward(tape, f));
}

#define DISTOP_INSTANTIATE(T)                                                            \
  template Var<T> tensor_parallel_copy(Tape&, const Var<T>&,                             \
                                       const std::shared_ptr<const AllSumReduce<T>>&);   \
  template Var<T> tensor_parallel_reduce(Tape&, const Var<T>&,                           \
                                         const std::shared_ptr<const AllSumReduce<T>>&); \
  template class ColumnParallelLinear<T>;                                                \
  template class RowParallelLinear<T>;                                                   \
  template class TensorParallelMultiheadAttention<T>;                                    \
  template class TensorParallelMLP<T>;                                                   \
  template class TensorParallelTransformerEncoderLayer<T>;
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
