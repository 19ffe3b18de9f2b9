#pragma once
// Linear<T>: a fully connected layer on each rank's local box, y = x W^T + b.

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// Options of a linear layer (Linear and DistributedLinear), for designated initialisers:
// `{.bias = false, .seed = 3}`.
struct LinearOptions {
  bool bias = true;
  // The initial parameters are a function of the seed alone (not of the partitioning); give each
  // layer of a model its own.
  std::uint64_t seed = 0;
};

// A local layer: every rank applies it to its own box of the input, so the batch axis may be split
// (or replicated) any way while the feature axis must be whole. The weight [out, in] and bias
// [out] are replicated over `partition` (by default this process alone), one copy per rank, each
// its own component under the sum convention; every rank holding a box of the input must be in the
// partition. Parameters are initialised as PyTorch's nn.Linear does, uniform in
// [-1/sqrt(in), 1/sqrt(in)], from counter-based random numbers (nn::uniform_init), so the values
// depend on the seed only, not on the partitioning.
//
// forward is local (no messages). Its tape entry adds dW = dy^T x and db = the column sums of dy to
// the parameters' gradients and dx = dy W to the input's (each only where a gradient is required);
// every rank of the parameter partition gets a parameter gradient, zero where it holds no input.
// Parameters "weight" and "bias" (PyTorch's names and layouts), per_replica.
//
//   nn::Linear<float> fc(784, 10, {.seed = 1});
template <class T>
class Linear : public Module<T> {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, LinearOptions options = {});
  Linear(std::int64_t in_features, std::int64_t out_features, Partition partition,
         LinearOptions options = {});

  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }
  bool has_bias() const noexcept { return bias_.defined(); }
  const Partition& partition() const noexcept { return partition_; }

  // [out, in]
  Var<T>& weight() noexcept { return weight_; }
  // [out]; an Error when the layer was made without a bias.
  Var<T>& bias();

  // y = x W^T + b for x [batch, in] (feature axis unsplit); y lives in
  // x.space().with_extent(1, out). Recorded on the tape when x or a parameter requires a gradient.
  // Not to be called on one layer from several threads at once (it caches the output space).
  Var<T> forward(Tape& tape, const Var<T>& x) const;

 private:
  std::int64_t in_;
  std::int64_t out_;
  Partition partition_;
  Var<T> weight_;
  Var<T> bias_;
  // The output space of the last input space seen. Building one (TensorSpace::with_extent) costs
  // about a microsecond, as much as the whole GEMM of a small layer, and a training loop passes
  // inputs of the same space step after step.
  mutable TensorSpace last_in_;
  mutable TensorSpace last_out_;

  const TensorSpace& output_space(const TensorSpace& in) const;
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace distop::nn
