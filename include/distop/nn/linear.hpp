#pragma once
// Linear<T>: a fully connected layer on each rank's local box, y = x W^T + b.

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/partition.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop::nn {

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
template <class T>
class Linear {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, std::uint64_t seed,
         Partition partition = Partition::self(), bool bias = true);

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

  // The weight, then the bias if there is one.
  std::vector<Var<T>> parameters() const;

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
