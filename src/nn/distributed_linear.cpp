#include "distop/nn/distributed_linear.hpp"

#include <cmath>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/functional.hpp"
#include "distop/nn/init.hpp"

namespace distop::nn {

namespace {
constexpr const char* kOp = "DistributedLinear";
}

template <class T>
DistributedLinear<T>::DistributedLinear(std::int64_t in_features, std::int64_t out_features,
                                        const Partition& weight_partition, LinearOptions options)
    : in_(in_features),
      out_(out_features),
      has_bias_(options.bias),
      p_w_(weight_partition),
      p_x_(weight_partition.slice(0, 0)),
      p_col_(weight_partition.slice(1, 0)),
      p_y_(p_col_.reshape(Shape{1, p_col_.size()})) {
  DISTOP_CHECK(p_w_.dim() == 2, kOp,
               "the weight partition must be a 2-D [P_out, P_in] grid, found ", p_w_.str());
  DISTOP_CHECK(in_ >= p_w_.shape()[1] && out_ >= p_w_.shape()[0], kOp, "a [", out_, ", ", in_,
               "] weight cannot be split over ", p_w_.str(), ": a block would be empty");
  x_plan_ = std::make_shared<const BroadcastPlan>(p_x_, p_w_);
  y_plan_ = std::make_shared<const BroadcastPlan>(p_col_, p_w_);
  DistTensor<T> w(TensorSpace(Shape{out_, in_}, p_w_));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  uniform_init(w, parameter_seed(options.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
  if (has_bias_) {
    DistTensor<T> b(TensorSpace(p_y_, Decomposition::balanced(Shape{out_}, p_y_.shape(), {1})));
    uniform_init(b, parameter_seed(options.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(b), true));
  }
}

template <class T>
TensorSpace DistributedLinear<T>::input_space(std::int64_t batch) const {
  return TensorSpace(Shape{batch, in_}, p_x_);
}

template <class T>
TensorSpace DistributedLinear<T>::output_space(std::int64_t batch) const {
  return TensorSpace(Shape{batch, out_}, p_y_);
}

template <class T>
const typename DistributedLinear<T>::Plans& DistributedLinear<T>::plans(std::int64_t batch) {
  auto it = plans_.find(batch);
  if (it != plans_.end()) return it->second;
  Plans p;
  p.broadcast_x = std::make_shared<const Broadcast<T>>(x_plan_, input_space(batch));
  p.column_space =
      TensorSpace(p_col_, Decomposition::balanced(Shape{batch, out_}, p_col_.shape(), {-1, 0}));
  p.reduce_y = std::make_shared<const SumReduce<T>>(y_plan_, p.column_space);
  p.output_space = output_space(batch);
  return plans_.emplace(batch, std::move(p)).first->second;
}

template <class T>
Var<T> DistributedLinear<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("DistributedLinear", this->registered_path());
  const auto& g = x.space().global_shape();
  DISTOP_CHECK(g.rank() == 2 && g[1] == in_, kOp, "expected an input of shape [batch, ", in_,
               "], found ", g.str());
  const auto& p = plans(g[0]);
  check_space(x.value(), p.broadcast_x->domain(), kOp, "the input");
  auto xb = apply<T>(tape, p.broadcast_x, x);
  auto z = matmul_nt(tape, xb, weight_, p.reduce_y->domain());
  auto y = reinterpret(tape, apply<T>(tape, p.reduce_y, z), p.output_space);
  return has_bias_ ? add_bias(tape, y, bias_) : y;
}

template class DistributedLinear<float>;
template class DistributedLinear<double>;

}  // namespace distop::nn
