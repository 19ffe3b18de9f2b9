// Modules of distributed layers: the state_dict of global tensors equals the one-rank model's,
// round-trips through a file at any rank count, and bad files fail alike on every rank.
#include "distop/nn/module.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "distop/autodiff/apply.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/io/state_dict.hpp"
#include "distop/nn/batch_norm.hpp"
#include "distop/nn/distributed_conv.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/nn/linear.hpp"
#include "distop/optim/sgd.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

constexpr std::uint64_t kSeed = 11;

// A distributed model over every rank: a convolution split by output channels, a linear layer
// with its weight split by columns, and a batch norm whose statistics span the ranks.
class Distributed : public nn::Module<double> {
 public:
  explicit Distributed(std::uint64_t seed) {
    const int n = world_size();
    register_module("conv", std::make_shared<nn::DistributedConv<double>>(
                                2, 2, 4, 3, Partition::world(Shape{n > 1 ? 2 : 1, 1, 1, 1}),
                                nn::ConvOptions{.padding = 1, .seed = seed}));
    register_module(
        "fc", std::make_shared<nn::DistributedLinear<double>>(8, 3, Partition::world(Shape{1, n}),
                                                              nn::LinearOptions{.seed = seed + 1}));
    register_module(
        "bn", std::make_shared<nn::DistributedBatchNorm<double>>(3, Partition::world(Shape{n, 1})));
  }
};

// The same model on this process alone.
class Local : public nn::Module<double> {
 public:
  explicit Local(std::uint64_t seed) {
    register_module("conv", std::make_shared<nn::Conv<double>>(
                                2, 2, 4, 3, nn::ConvOptions{.padding = 1, .seed = seed}));
    register_module(
        "fc", std::make_shared<nn::Linear<double>>(8, 3, nn::LinearOptions{.seed = seed + 1}));
    register_module("bn", std::make_shared<nn::BatchNorm<double>>(3));
  }
};

// `module`'s parameters under the same names (the same Vars), without its buffers.
class ParametersOf : public nn::Module<double> {
 public:
  explicit ParametersOf(const nn::Module<double>& module) {
    for (const auto& p : module.named_parameters())
      if (p.name.find('.') == std::string::npos) register_parameter(p.name, p.var, p.reduction);
    for (const auto& [name, child] : module.named_children())
      register_module(name, std::make_shared<ParametersOf>(*child));
  }
};

// A directory every rank sees, removed at the end.
std::string shared_dir(const std::string& name) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("distop_module_test_" + name + "_" + std::to_string(::getpid())))
                         .string();
  int len = static_cast<int>(path.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path.resize(static_cast<std::size_t>(len));
  MPI_Bcast(path.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::create_directories(path);
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

TEST(DistributedModule, StateDictIsTheOneRankModelsOnEveryRank) {
  Distributed d(kSeed);
  Local l(kSeed);
  const auto ds = d.state_dict();
  const auto ls = l.state_dict();
  ASSERT_EQ(ds.size(), ls.size());
  for (const auto& [name, entry] : ls) {
    ASSERT_TRUE(ds.count(name)) << name;
    EXPECT_EQ(ds.at(name).shape, entry.shape) << name;
    EXPECT_EQ(ds.at(name).values, entry.values) << name;
  }
}

TEST(DistributedModule, ReductionKindsAreDeclaredPerParameter) {
  Distributed d(kSeed);
  for (const auto& p : d.named_parameters()) {
    const bool tied = p.name.rfind("bn.", 0) == 0;
    EXPECT_EQ(p.reduction, tied ? nn::GradientReduction::tied : nn::GradientReduction::per_replica)
        << p.name;
  }
}

TEST(DistributedModule, FileRoundTripAtAnyRankCount) {
  const auto dir = shared_dir("roundtrip");
  const std::string path = dir + "/model.safetensors";
  Distributed d(kSeed);
  io::save_state_dict(path, d);
  // Into a distributed model made with another seed, and into the one-rank model on each rank.
  Distributed other(kSeed + 50);
  io::load_state_dict(path, other);
  Local local(kSeed + 60);
  EXPECT_TRUE(io::load_state_dict(path, local).missing_keys.empty());
  const auto want = Local(kSeed).state_dict();
  EXPECT_EQ(other.state_dict().at("fc.weight").values, want.at("fc.weight").values);
  EXPECT_EQ(local.state_dict().at("conv.weight").values, want.at("conv.weight").values);
  // Each rank's box of the distributed weight is its block of the global one again.
  const auto& w = d.named_parameters()[0].var.value().local();
  EXPECT_EQ(other.named_parameters()[0].var.value().local().to_vector(), w.to_vector());
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST(DistributedModule, ABadFileIsTheSameErrorOnEveryRankAndChangesNothing) {
  const auto dir = shared_dir("bad");
  Distributed d(kSeed);
  const std::string path = dir + "/local.safetensors";
  if (world_rank() == 0) {
    nn::Linear<double> fc(8, 3);
    io::save_state_dict(path, fc);  // names "weight", "bias": d has none of them
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto before = d.state_dict();
  std::string message;
  try {
    io::load_state_dict(path, d);
    ADD_FAILURE() << "loaded a file of another model";
  } catch (const Error& e) {
    message = e.detail();
  }
  EXPECT_NE(message.find(path), std::string::npos) << message;
  // Rank 0's message on every rank (the others say which rank found it first).
  std::string first = message;
  int len = static_cast<int>(first.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  first.resize(static_cast<std::size_t>(len));
  MPI_Bcast(first.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_NE(message.find(first), std::string::npos) << message << " vs rank 0's " << first;
  EXPECT_EQ(d.state_dict().at("fc.weight").values, before.at("fc.weight").values);
  // Not strict: nothing matches, so everything is reported and nothing loaded.
  const auto r = io::load_state_dict(path, d, false);
  EXPECT_EQ(r.unexpected_keys.size(), 2u);
  EXPECT_EQ(r.missing_keys.size(), before.size());
  EXPECT_THROW(io::load_state_dict(dir + "/none.safetensors", d), Error);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

TEST(DistributedModule, CheckpointsCarryTheBuffers) {
  const auto dir = shared_dir("checkpoint");
  Distributed d(kSeed);
  // Running statistics and a batch count of their own, as training would leave them.
  for (auto& b : d.named_buffers()) {
    if (b.count) {
      *b.count = 7;
    } else if (b.tensor.local_numel() > 0) {
      b.tensor.local().fill(b.name == "bn.running_mean" ? 0.25 : 2.5);
    }
  }
  optim::SGD<double> opt(d.parameters(), {.lr = 0.1, .momentum = 0.9});
  io::CheckpointInfo info;
  info.global_step = 3;
  io::save_checkpoint(dir, d, opt, info);

  Distributed e(kSeed + 1);
  optim::SGD<double> opt_e(e.parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(io::load_checkpoint(dir, e, opt_e).global_step, 3);
  EXPECT_EQ(e.state_dict().at("bn.running_var").values, d.state_dict().at("bn.running_var").values);
  EXPECT_EQ(
      e.state_dict().at("bn.num_batches_tracked").values,
      (std::variant<std::vector<double>, std::vector<std::int64_t>>(std::vector<std::int64_t>{7})));
  EXPECT_EQ(e.state_dict().at("fc.weight").values, d.state_dict().at("fc.weight").values);

  // The parameters alone (a model without the buffers) do not match a checkpoint that holds
  // buffers: strict.
  ParametersOf parameters_only(e);
  ASSERT_EQ(parameters_only.named_parameters().size(), e.named_parameters().size());
  ASSERT_TRUE(parameters_only.named_buffers().empty());
  optim::SGD<double> opt_f(parameters_only.parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(io::load_checkpoint(dir, parameters_only, opt_f), Error);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

// A local layer made with its default partition (this process alone) under an input spread over
// every rank by its batch: each rank applies its own copy to its rows, as the same layer on this
// process's rows alone does, forward and backward (the default once refused every input box of
// another rank as "not in the layer's partition").
TEST(LocalLayers, DefaultPartitionTakesAWorldInputSplitByBatch) {
  const int n = world_size();
  const TensorSpace xs(Shape{2 * n, 8}, Partition::world(Shape{n, 1}));
  const auto x_value = distop::testing::random_tensor<double>(xs, 5);
  nn::Linear<double> fc(8, 3, nn::LinearOptions{.seed = 2});
  Tape tape;
  Var<double> x(x_value, true);
  Var<double> y = fc.forward(tape, x);
  backward(tape, y);

  // The same layer on this rank's rows alone.
  nn::Linear<double> alone(8, 3, nn::LinearOptions{.seed = 2});
  const TensorSpace own(xs.local_shape(), Partition::self(Shape{1, 1}));
  Tape own_tape;
  Var<double> x_own(DistTensor<double>::from_local(own, x_value.local().clone()), true);
  Var<double> y_own = alone.forward(own_tape, x_own);
  backward(own_tape, y_own);
  EXPECT_EQ(y.value().local().to_vector(), y_own.value().local().to_vector());
  EXPECT_EQ(x.grad().local().to_vector(), x_own.grad().local().to_vector());
  EXPECT_EQ(fc.weight().grad().local().to_vector(), alone.weight().grad().local().to_vector());
}

}  // namespace
