#include "distop/nn/linear.hpp"

#include <cmath>
#include <utility>

#include "common.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/kernels/gemm.hpp"
#include "distop/nn/init.hpp"

namespace distop::nn {

using detail::replicated;
using kernels::Op;

template <class T>
Linear<T>::Linear(std::int64_t in_features, std::int64_t out_features, LinearOptions options)
    : Linear(in_features, out_features, Partition::self(), options) {}

template <class T>
Linear<T>::Linear(std::int64_t in_features, std::int64_t out_features, Partition partition,
                  LinearOptions options)
    : in_(in_features), out_(out_features), partition_(std::move(partition)) {
  DISTOP_CHECK(in_ > 0 && out_ > 0, "Linear", "feature counts must be positive, found in ", in_,
               " and out ", out_);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  DistTensor<T> w(replicated(partition_, Shape{out_, in_}));
  uniform_init(w, parameter_seed(options.seed, "weight"), bound);
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
  if (options.bias) {
    DistTensor<T> b(replicated(partition_, Shape{out_}));
    uniform_init(b, parameter_seed(options.seed, "bias"), bound);
    bias_ = this->register_parameter("bias", Var<T>(std::move(b), true));
  }
}

template <class T>
Var<T>& Linear<T>::bias() {
  DISTOP_CHECK(has_bias(), "Linear::bias", "the layer was made without a bias");
  return bias_;
}

template <class T>
const TensorSpace& Linear<T>::output_space(const TensorSpace& in) const {
  // Equal spaces on the very same communicators, so that y's collectives run where x's would.
  const bool hit = in.same_object(last_in_) ||
                   (in == last_in_ && in.partition().comm() == last_in_.partition().comm() &&
                    in.partition().parent() == last_in_.partition().parent());
  if (!hit) {
    last_out_ = in.with_extent(1, out_);
    last_in_ = in;
  }
  return last_out_;
}

template <class T>
Var<T> Linear<T>::forward(Tape& tape, const Var<T>& x) const {
  const trace::Compute span("Linear", this->registered_path());
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() == 2 && xs.global_shape()[1] == in_ && xs.decomposition().parts(1) == 1,
               "Linear", "expected an input of global shape [batch, ", in_,
               "] with the feature axis unsplit, found ", xs.str());
  // Whether this rank holds a box of the input (and so computes).
  const bool active = xs.partition().active();
  detail::check_input_ranks(xs, partition_, false, "Linear");

  const TensorSpace& ys = output_space(xs);
  auto compute = [&] {
    auto y = DistTensor<T>::uninitialized(ys);
    if (active) {
      // y = x W^T, then y += b (OpenBLAS's GEMM for narrow layers is slower with beta = 1, which
      // reads y, than with beta = 0 followed by the bias rows: 64 x 128 x 10 by about 0.1 us).
      kernels::gemm(Op::N, Op::T, T(1), x.value().local(), weight_.value().local(), T(0),
                    y.local());
      if (has_bias()) kernels::add_row_vector(y.local(), bias_.value().local());
    }
    // Inputs: 0 x, 1 the weight, 2 the bias (when the layer has one).
    return Computed{
        std::move(y), [active](const DistTensor<T>& dy_t, Gradients<T>& grads) {
          const Tensor<T>& dy = dy_t.local();
          const Tensor<T>& xl = grads.input(0).value().local();
          // Every rank adds a gradient (possibly empty, or zero) so that whether a Var
          // has one is the same on all ranks, which the adjoints of collective
          // operations upstream rely on.
          auto add = [&](std::size_t i, auto write) {
            if (!grads.required(i)) return;
            if (active)
              grads.accumulate(i, write);
            else
              grads.input(i).grad();
          };
          add(1, [&](T beta, Tensor<T>& g) { kernels::gemm(Op::T, Op::N, T(1), dy, xl, beta, g); });
          if (grads.size() > 2)
            add(2, [&](T beta, Tensor<T>& g) { kernels::sum_rows(dy, beta, g); });
          add(0, [&](T beta, Tensor<T>& g) {
            kernels::gemm(Op::N, Op::N, T(1), dy, grads.input(1).value().local(), beta, g);
          });
        }};
  };
  if (has_bias()) return make_function<T>(tape, "Linear", {x, weight_, bias_}, compute);
  return make_function<T>(tape, "Linear", {x, weight_}, compute);
}

template class Linear<float>;
template class Linear<double>;

}  // namespace distop::nn
