#pragma once
// A small MLP fixture shared by the data-parallel MPI tests (DataParallel, ShardedOptimizer):
// a model over one replica's ranks and the cross-entropy loss of a synthetic global batch on it.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/core/random.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/nn/linear.hpp"

namespace distop::test {

// An MLP over one replica's ranks (`model`): fc1 (kIn -> kHidden) split by columns over up to two
// of them, fc2 (kHidden -> kClasses) on the first; fc1 is initialized from `seed`, fc2 from
// `seed + 1`.
class ReplicaMlp : public nn::Module<double> {
 public:
  static constexpr std::int64_t kIn = 6, kHidden = 10, kClasses = 4;

  ReplicaMlp(MPI_Comm model, std::uint64_t seed) {
    int m = 0;
    MPI_Comm_size(model, &m);
    fc1_ = register_module("fc1", std::make_shared<nn::DistributedLinear<double>>(
                                      kIn, kHidden, Partition(model, Shape{1, m > 2 ? 2 : m}),
                                      nn::LinearOptions{.seed = seed}));
    fc2_ = register_module("fc2", std::make_shared<nn::DistributedLinear<double>>(
                                      kHidden, kClasses, Partition(model, Shape{1, 1}),
                                      nn::LinearOptions{.seed = seed + 1}));
  }
  Var<double> forward(Tape& t, const Var<double>& x) {
    return fc2_->forward(t, nn::relu(t, fc1_->forward(t, x)));
  }
  TensorSpace input_space(std::int64_t batch) const { return fc1_->input_space(batch); }

 private:
  std::shared_ptr<nn::DistributedLinear<double>> fc1_, fc2_;
};

// The loss of examples [first, first + batch) of a synthetic global batch on `model`, recorded on
// `tape`: example n's feature j is uniform in [-1, 1) from random stream `data_seed`, its class is
// n mod kClasses.
inline Var<double> replica_mlp_loss(ReplicaMlp& model, Tape& tape, std::uint64_t data_seed,
                                    std::int64_t first, std::int64_t batch) {
  const auto feature = [data_seed](std::int64_t n, std::int64_t j) {
    return random::uniform(data_seed, static_cast<std::uint64_t>(n * ReplicaMlp::kIn + j)) * 2 - 1;
  };
  DistTensor<double> x(model.input_space(batch));
  std::vector<double> v;
  const auto& sp = x.space();
  for (std::int64_t i = 0; i < sp.local_shape()[0]; ++i)
    for (std::int64_t j = 0; j < sp.local_shape()[1]; ++j)
      v.push_back(feature(first + i, sp.local_offset()[1] + j));
  if (!v.empty()) x.local().copy_from(Tensor<double>::from_vector(sp.local_shape(), v));
  auto logits = model.forward(tape, Var<double>(x));
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < logits.space().local_shape()[0]; ++i)
    labels.push_back(static_cast<std::int32_t>((first + logits.space().local_offset()[0] + i) %
                                               ReplicaMlp::kClasses));
  return loss::cross_entropy(tape, logits, labels);
}

}  // namespace distop::test
