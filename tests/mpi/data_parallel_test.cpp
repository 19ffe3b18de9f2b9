// DataParallel, the data-parallel wrapper: its backward() and backward_no_sync() replay a tape of
// its model, a plain distop::backward on such a tape is an Error on every rank naming a parameter,
// and a tape cleared without backward is fine; replicas holding different models are an Error on
// every rank at construction; a loss whose partition spans k replicas is seeded k, so that every
// replica gets the gradient of the mean over the distinct losses (of the loss itself when it spans
// every replica), and losses spanning different numbers of replicas are an Error on every rank; and
// the training loop docs/data_parallel.md shows trains as one rank on the global batch and
// checkpoints.
#include "distop/parallel/data_parallel.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/dist/assemble.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/reduction.hpp"
#include "distop/optim/sgd.hpp"
#include "mpi_test_util.hpp"
#include "replica_mlp.hpp"
#include "temp_dir.hpp"

using namespace distop;
using distop::test::ReplicaMlp;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr std::uint64_t kSeed = 3, kDataSeed = 77;

// Every replica count that divides the world's ranks.
std::vector<int> replica_counts() {
  std::vector<int> r;
  for (int k = 1; k <= world_size(); ++k)
    if (world_size() % k == 0) r.push_back(k);
  return r;
}

Var<double> mlp_loss(ReplicaMlp& model, Tape& tape, std::int64_t first, std::int64_t batch) {
  return distop::test::replica_mlp_loss(model, tape, kDataSeed, first, batch);
}

// Each parameter's global gradient, by name, of the one-rank MLP over examples [0, batch).
std::map<std::string, std::vector<double>> mlp_reference(std::int64_t batch) {
  ReplicaMlp model(MPI_COMM_SELF, kSeed);
  Tape tape;
  auto loss = mlp_loss(model, tape, 0, batch);
  backward(tape, loss);
  std::map<std::string, std::vector<double>> g;
  for (auto& p : model.named_parameters()) g[p.name] = p.var.grad().local().to_vector();
  return g;
}

// This rank's box of a global tensor of p's space.
std::vector<double> box_of(const Var<double>& p, const std::vector<double>& global) {
  DistTensor<double> box(p.space());
  distribute(global, box);
  return box.local().to_vector();
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i])))
        << what << " entry " << i;
}

// Every parameter's gradient is `scale` times this rank's box of `global` (by name).
void expect_gradients(const nn::Module<double>& model,
                      const std::map<std::string, std::vector<double>>& global, double scale,
                      const std::string& what) {
  for (const auto& p : model.named_parameters()) {
    ASSERT_TRUE(p.var.has_grad()) << what << ": " << p.name;
    auto want = box_of(p.var, global.at(p.name));
    for (auto& v : want) v *= scale;
    expect_close(p.var.grad().local().to_vector(), want, what + ": " + p.name);
  }
}

void zero_grad(const nn::Module<double>& model) {
  for (auto& p : model.parameters()) p.zero_grad();
}

// Runs `action`, which must throw distop::Error with `what` in its message.
void expect_error(const std::function<void()>& action, const std::string& what,
                  const std::string& context) {
  try {
    action();
    ADD_FAILURE() << context << ": no distop::Error (expected one saying " << what << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << context << ": " << e.what();
  }
}

TEST(DataParallel, PlainBackwardOnItsModelsTapeIsAnErrorNamingAParameter) {
  const std::int64_t global = 24;
  const auto ref = mlp_reference(global);
  for (const int r : replica_counts()) {
    const std::string context = std::to_string(r) + " replicas";
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    ReplicaMlp model(replicas.model_comm(), kSeed);
    parallel::DataParallel<double> dp(model, replicas);
    const std::int64_t b = global / r;
    {
      Tape tape;
      auto loss = mlp_loss(model, tape, replicas.index() * b, b);
      try {
        backward(tape, loss);
        ADD_FAILURE() << context << ": plain backward on a DataParallel model's tape did not throw";
      } catch (const Error& e) {
        const std::string message = e.what();
        std::size_t named = 0;  // the model's parameters that the message names
        for (const auto& p : model.named_parameters())
          named += message.find("parameter '" + p.name + "'") != std::string::npos ? 1 : 0;
        EXPECT_EQ(named, 1u) << context << ": " << message;
        EXPECT_NE(message.find("DataParallel's backward"), std::string::npos) << message;
      }
    }
    // Nothing waits on another rank: DataParallel::backward, collective, runs next and gives the
    // global batch's gradient.
    zero_grad(model);
    Tape tape;
    auto loss = mlp_loss(model, tape, replicas.index() * b, b);
    dp.backward(tape, loss);
    expect_gradients(model, ref, 1.0, context + ", after the error");
  }
}

TEST(DataParallel, ItsBackwardsAClearedTapeAndOtherModelsAreFine) {
  const std::int64_t global = 24;
  const auto ref = mlp_reference(global);
  for (const int r : replica_counts()) {
    const std::string context = std::to_string(r) + " replicas";
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    ReplicaMlp model(replicas.model_comm(), kSeed);
    parallel::DataParallel<double> dp(model, replicas);
    const std::int64_t b = global / r;
    {  // recorded, then cleared
      Tape tape;
      auto loss = mlp_loss(model, tape, replicas.index() * b, b);
      EXPECT_NO_THROW(tape.clear()) << context;
    }
    {  // recorded, then destroyed
      Tape tape;
      auto loss = mlp_loss(model, tape, replicas.index() * b, b);
    }
    {  // a model that no DataParallel holds takes plain backward
      ReplicaMlp other(replicas.model_comm(), kSeed);
      Tape tape;
      auto loss = mlp_loss(other, tape, replicas.index() * b, b);
      EXPECT_NO_THROW(backward(tape, loss)) << context;
    }
    // The same rows twice, the first pass without reduction: twice the global batch's gradient.
    for (const bool sync : {false, true}) {
      Tape tape;
      auto loss = mlp_loss(model, tape, replicas.index() * b, b);
      if (sync)
        EXPECT_NO_THROW(dp.backward(tape, loss)) << context;
      else
        EXPECT_NO_THROW(dp.backward_no_sync(tape, loss)) << context;
    }
    expect_gradients(model, ref, 2.0, context + ", accumulated");
  }
}

// An MLP of one replica (ReplicaMlp's layout) with a hidden width and a second layer's name of its
// own.
class Net : public nn::Module<double> {
 public:
  Net(MPI_Comm model, std::int64_t hidden, const std::string& second = "fc2") {
    const Partition one(model, Shape{1, 1});
    register_module("fc1", std::make_shared<nn::DistributedLinear<double>>(
                               6, hidden, one, nn::LinearOptions{.seed = 1}));
    register_module(second, std::make_shared<nn::DistributedLinear<double>>(
                                hidden, 4, one, nn::LinearOptions{.seed = 2}));
  }
};

TEST(DataParallel, ReplicasOfDifferentModelsAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  for (const int r : replica_counts()) {
    if (r == 1) continue;
    const std::string context = std::to_string(r) + " replicas";
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    const bool last = replicas.index() == r - 1;
    Net wider(replicas.model_comm(), last ? 11 : 10);  // another shape on the last replica
    expect_error([&] { parallel::DataParallel<double> dp(wider, replicas); }, "different models",
                 context + ", a wider layer");
    Net renamed(replicas.model_comm(), 10, last ? "head" : "fc2");  // another name
    expect_error([&] { parallel::DataParallel<double> dp(renamed, replicas); }, "different models",
                 context + ", a renamed layer");
    Net same(replicas.model_comm(), 10);
    EXPECT_NO_THROW(parallel::DataParallel<double> dp(same, replicas)) << context;
  }
}

// The seeding rule, on one replica per rank: a local layer replicated over `partition` (every
// rank, or this one alone), each rank's copy its replica's (as examples/simclr's encoder).
constexpr std::int64_t kIn = 4, kOut = 3, kRows = 3;  // kRows rows per replica

class Layer : public nn::Module<double> {
 public:
  explicit Layer(const Partition& partition)
      : fc_(register_module("fc", std::make_shared<nn::Linear<double>>(
                                      kIn, kOut, partition, nn::LinearOptions{.seed = kSeed}))) {}
  Var<double> forward(Tape& tape, const Var<double>& x) const { return fc_->forward(tape, x); }

 private:
  std::shared_ptr<nn::Linear<double>> fc_;
};

// The rows of replicas [first, first + k) stacked, [k kRows, kIn], in `partition`'s space (axis 0
// split over its ranks, in order; each rank's box its replica's kRows rows), and the loss of those
// rows: sum(relu(layer(x))), whose components (each rank's box's sum) add up to it.
Var<double> group_loss(const Layer& layer, Tape& tape, int first, int k,
                       const Partition& partition) {
  DistTensor<double> x(TensorSpace(Shape{k * kRows, kIn}, partition));
  const auto& sp = x.space();
  std::vector<double> v;
  for (std::int64_t i = 0; i < sp.local_shape()[0]; ++i)
    for (std::int64_t j = 0; j < kIn; ++j) {
      const auto n = first * kRows + sp.local_offset()[0] + i;
      v.push_back(random::uniform(kDataSeed, static_cast<std::uint64_t>(n * kIn + j)) * 2 - 1);
    }
  if (!v.empty()) x.local().copy_from(Tensor<double>::from_vector(sp.local_shape(), v));
  return nn::sum(tape, nn::relu(tape, layer.forward(tape, Var<double>(x))));
}

// The gradient of the loss of replicas [first, first + k)'s rows, computed on this rank alone.
std::map<std::string, std::vector<double>> group_reference(int first, int k) {
  Layer layer(Partition::self());
  Tape tape;
  auto loss = group_loss(layer, tape, first, k, Partition::self(Shape{1, 1}));
  backward(tape, loss);
  std::map<std::string, std::vector<double>> g;
  for (auto& p : layer.named_parameters()) g[p.name] = p.var.grad().local().to_vector();
  return g;
}

// For every k dividing the replica count, the groups of k replicas [g k, (g + 1) k) as partitions
// of their ranks (made collectively, every rank making every group's).
std::vector<Partition> groups_of(int k) {
  std::vector<Partition> groups;
  for (int first = 0; first < world_size(); first += k) {
    std::vector<int> ranks;
    for (int q = first; q < first + k; ++q) ranks.push_back(q);
    groups.push_back(Partition::world(Shape{k, 1}, ranks));
  }
  return groups;
}

TEST(DataParallel, ALossSpanningKReplicasIsSeededK) {
  // R replicas, each rank its own. The replicas are cut into groups of k; each group's loss is one
  // loss over the group's rows (its partition spans the group's k replicas, each rank's component
  // its own rows' part). DataParallel::backward gives every replica the gradient of the mean of
  // the R / k groups' losses: with k = 1 the mean of the replicas' own losses, with k = R the
  // gradient of the one loss over every replica's rows. Two passes each (the second on the
  // rebuilt buckets), against the same losses computed on one rank.
  const int replicas_n = world_size();
  parallel::Replicas replicas(MPI_COMM_WORLD, replicas_n);
  for (int k = 1; k <= replicas_n; ++k) {
    if (replicas_n % k != 0) continue;
    const std::string context =
        std::to_string(replicas_n) + " replicas, losses over " + std::to_string(k) + " of them";
    const auto groups = groups_of(k);
    const int mine = replicas.index() / k;
    std::map<std::string, std::vector<double>> want;  // the mean over the groups
    for (int g = 0; g < replicas_n / k; ++g)
      for (const auto& [name, grad] : group_reference(g * k, k)) {
        auto& w = want[name];
        w.resize(grad.size());
        for (std::size_t i = 0; i < grad.size(); ++i) w[i] += grad[i] / (replicas_n / k);
      }
    Layer layer(Partition::world(Shape{world_size()}));
    parallel::DataParallel<double> dp(layer, replicas, {.first_bucket_bytes = 8});
    for (int pass = 0; pass < 2; ++pass) {
      Tape tape;
      auto loss = group_loss(layer, tape, mine * k, k, groups[static_cast<std::size_t>(mine)]);
      dp.backward(tape, loss);
      expect_gradients(layer, want, 1.0, context + ", pass " + std::to_string(pass));
      zero_grad(layer);
    }
  }
}

TEST(DataParallel, LossesSpanningDifferentNumbersOfReplicasAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int replicas_n = world_size();
  parallel::Replicas replicas(MPI_COMM_WORLD, replicas_n);
  const Partition pair = Partition::world(Shape{2, 1}, {0, 1});
  const Partition own = groups_of(1).at(static_cast<std::size_t>(world_rank()));
  Layer layer(Partition::world(Shape{world_size()}));
  parallel::DataParallel<double> dp(layer, replicas);
  {
    // Rank 0's loss spans replicas 0 and 1; every other replica's is its own.
    Tape tape;
    auto loss = world_rank() == 0 ? group_loss(layer, tape, 0, 2, pair)
                                  : group_loss(layer, tape, replicas.index(), 1, own);
    expect_error([&] { dp.backward(tape, loss); }, "span between 1 and 2 of the",
                 "one loss over 2 replicas, the others over 1");
  }
  if (replicas_n >= 3) {
    // One loss over every replica but the last (R - 1 replicas, which does not divide R); the
    // last rank holds no component of it.
    std::vector<int> ranks;
    for (int q = 0; q < replicas_n - 1; ++q) ranks.push_back(q);
    const Partition most = Partition::world(Shape{replicas_n - 1, 1}, ranks);
    Tape tape;
    auto loss = group_loss(layer, tape, 0, replicas_n - 1, most);
    expect_error([&] { dp.backward(tape, loss); }, "dividing the replica count",
                 "one loss over R - 1 replicas");
  }
  if (replicas_n >= 4) {
    // After a first backward of losses over pairs of replicas, ranks 2 and 3 alone change to a
    // loss of their own: every rank learns it at the next backward (the span is agreed at every
    // backward), rather than ranks 0 and 1 waiting in the reduction for the others.
    const Partition pairs = groups_of(2).at(static_cast<std::size_t>(world_rank() / 2));
    {
      Tape tape;
      auto loss = group_loss(layer, tape, replicas.index() / 2 * 2, 2, pairs);
      dp.backward(tape, loss);
      for (const auto& p : layer.parameters()) p.zero_grad();
    }
    Tape tape;
    auto loss = world_rank() >= 2 && world_rank() < 4
                    ? group_loss(layer, tape, replicas.index(), 1, own)
                    : group_loss(layer, tape, replicas.index() / 2 * 2, 2, pairs);
    expect_error([&] { dp.backward(tape, loss); }, "span between 1 and 2 of the",
                 "ranks 2 and 3 changed to a loss of their own after the first backward");
  }
  // Nothing was reduced, and the ranks are in step: a loss per replica works next.
  Tape tape;
  auto loss = group_loss(layer, tape, replicas.index(), 1, own);
  dp.backward(tape, loss);
  std::map<std::string, std::vector<double>> want;
  for (int q = 0; q < replicas_n; ++q)
    for (const auto& [name, grad] : group_reference(q, 1)) {
      auto& w = want[name];
      w.resize(grad.size());
      for (std::size_t i = 0; i < grad.size(); ++i) w[i] += grad[i] / replicas_n;
    }
  expect_gradients(layer, want, 1.0, "a loss per replica after the errors");
}

// A directory that every rank sees: made by rank 0, its path broadcast.
class SharedDir {
 public:
  SharedDir() {
    if (world_rank() == 0) dir_ = std::make_unique<test::TempDir>("distop_data_parallel");
    std::string path = dir_ ? dir_->str() : std::string();
    int size = static_cast<int>(path.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(size));
    MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }
  const std::string& str() const { return path_; }

 private:
  std::unique_ptr<test::TempDir> dir_;
  std::string path_;
};

constexpr std::int64_t kGlobalBatch = 24;  // examples per step, divisible by 1..4
constexpr std::int64_t kSteps = 3;

// Each parameter's global value, by name, after kSteps steps of SGD on one rank over the global
// batch: what the loop below must give at any replica count.
std::map<std::string, std::vector<double>> one_rank_training() {
  ReplicaMlp model(MPI_COMM_SELF, /*seed=*/7);
  optim::SGD<double> opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (std::int64_t step = 0; step < kSteps; ++step) {
    Tape tape;
    auto loss =
        distop::test::replica_mlp_loss(model, tape, kDataSeed, step * kGlobalBatch, kGlobalBatch);
    backward(tape, loss);
    opt.step();
    opt.zero_grad();
  }
  std::map<std::string, std::vector<double>> values;
  for (auto& p : model.named_parameters()) values[p.name] = p.var.value().local().to_vector();
  return values;
}

TEST(DataParallel, TheDocsTrainingLoopTrainsAsOneRankAndCheckpoints) {
  const auto want = one_rank_training();
  for (const int replica_count : replica_counts()) {
    const std::string context = std::to_string(replica_count) + " replicas";
    SharedDir shared;
    const std::string& dir = shared.str();
    // [loop]
    parallel::Replicas replicas(MPI_COMM_WORLD, replica_count);  // R replicas of P / R ranks
    ReplicaMlp model(replicas.model_comm(), /*seed=*/7);  // each replica's copy on its own ranks
    parallel::DataParallel<double> dp(model, replicas);   // every replica starts as replica 0
    optim::SGD<double> opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    const std::int64_t share = kGlobalBatch / replicas.count();  // examples per replica per step
    for (std::int64_t step = 0; step < kSteps; ++step) {
      Tape tape;
      // This replica's share of the step's global batch: examples [first, first + share).
      const std::int64_t first = step * kGlobalBatch + replicas.index() * share;
      auto loss = distop::test::replica_mlp_loss(model, tape, kDataSeed, first, share);
      dp.backward(tape, loss);  // every replica: the gradient of the global batch's mean loss
      opt.step();
      opt.zero_grad();
      io::save_checkpoint(dir, dp, opt, {.global_step = step + 1});  // replica 0 writes
    }
    // [loop]
    for (const auto& p : model.named_parameters())
      expect_close(p.var.value().local().to_vector(), box_of(p.var, want.at(p.name)),
                   context + ": " + p.name);

    // The checkpoint resumes: another initialisation takes the weights and the momentum, and the
    // next step of both is the same.
    ReplicaMlp resumed(replicas.model_comm(), /*seed=*/8);
    parallel::DataParallel<double> resumed_dp(resumed, replicas);
    optim::SGD<double> resumed_opt(resumed.parameters(), {.lr = 0.1, .momentum = 0.9});
    EXPECT_EQ(io::load_checkpoint(dir, resumed_dp, resumed_opt).global_step, kSteps) << context;
    for (auto* m : {&model, &resumed}) {
      Tape tape;
      const std::int64_t first = kSteps * kGlobalBatch + replicas.index() * share;
      auto loss = distop::test::replica_mlp_loss(*m, tape, kDataSeed, first, share);
      (m == &model ? dp : resumed_dp).backward(tape, loss);
      (m == &model ? opt : resumed_opt).step();
    }
    const auto a = model.parameters(), b = resumed.parameters();
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(b[i].value().local().to_vector(), a[i].value().local().to_vector())
          << context << ", parameter " << i;
  }
}

}  // namespace
