// ShardedOptimizer (ZeRO stages 1 and 2): every optimizer of the family trains as unsharded data
// parallelism does, its state takes 1/R of the memory, and checkpoints taken at one replica count
// load and continue at another.
#include "distop/parallel/sharded_optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/linear.hpp"
#include "distop/optim/adagrad.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/rmsprop.hpp"
#include "distop/optim/sgd.hpp"
#include "distop/parallel/data_parallel.hpp"
#include "gradient_reducer.hpp"  // the buckets' chunks, which the state's shards follow
#include "mpi_test_util.hpp"
#include "replica_mlp.hpp"
#include "temp_dir.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr std::int64_t kGlobal = 24;
constexpr std::uint64_t kSeed = 5, kDataSeed = 91;

// The shared MLP, every replica's copy initialized from kSeed.
class Mlp : public distop::test::ReplicaMlp {
 public:
  explicit Mlp(MPI_Comm model) : ReplicaMlp(model, kSeed) {}
};

Var<double> loss_of(Mlp& model, Tape& tape, std::int64_t first, std::int64_t batch) {
  return distop::test::replica_mlp_loss(model, tape, kDataSeed, first, batch);
}

using Factory = parallel::ShardedOptimizer<double>::Factory;
using GroupFactory = parallel::ShardedOptimizer<double>::GroupFactory;

struct Case {
  std::string name;
  Factory make;
  // Two parameter groups instead (fc2's parameters, then fc1's, so that the optimizer's order is
  // not the model's), each with its own options.
  GroupFactory make_groups = {};
};

// The groups a case's optimizer takes: every parameter, or fc2's then fc1's.
std::vector<std::vector<Var<double>>> groups_of(Mlp& model, const Case& c) {
  auto all = model.parameters();
  if (!c.make_groups) return {all};
  return {{all[2], all[3]}, {all[0], all[1]}};
}

std::unique_ptr<optim::Optimizer<double>> make_unsharded(Mlp& model, const Case& c) {
  return c.make_groups ? c.make_groups(groups_of(model, c)) : c.make(model.parameters());
}

std::vector<Case> optimizers() {
  return {
      {"sgd nesterov and momentum, two groups", nullptr,
       [](std::vector<std::vector<Var<double>>> g) -> std::unique_ptr<optim::Optimizer<double>> {
         using Group = optim::SGD<double>::Group;
         return std::make_unique<optim::SGD<double>>(std::vector<Group>{
             {g.at(0), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}},
             {g.at(1), {.lr = 0.2, .momentum = 0.5, .weight_decay = 1e-3}}});
       }},
      {"adam",
       [](std::vector<Var<double>> p) -> std::unique_ptr<optim::Optimizer<double>> {
         return std::make_unique<optim::Adam<double>>(
             std::move(p), optim::AdamOptions{.lr = 0.01, .weight_decay = 1e-2});
       }},
      {"adamw amsgrad",
       [](std::vector<Var<double>> p) -> std::unique_ptr<optim::Optimizer<double>> {
         return std::make_unique<optim::AdamW<double>>(
             std::move(p), optim::AdamWOptions{.lr = 0.01, .amsgrad = true});
       }},
      {"rmsprop centered",
       [](std::vector<Var<double>> p) -> std::unique_ptr<optim::Optimizer<double>> {
         return std::make_unique<optim::RMSprop<double>>(
             std::move(p), optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
       }},
      {"adagrad",
       [](std::vector<Var<double>> p) -> std::unique_ptr<optim::Optimizer<double>> {
         return std::make_unique<optim::Adagrad<double>>(std::move(p),
                                                         optim::AdagradOptions{.lr = 0.05});
       }},
      {"adam, two groups", nullptr,
       [](std::vector<std::vector<Var<double>>> g) -> std::unique_ptr<optim::Optimizer<double>> {
         using Group = optim::Adam<double>::Group;
         return std::make_unique<optim::Adam<double>>(
             std::vector<Group>{{g.at(0), {.lr = 0.02, .weight_decay = 1e-2}},
                                {g.at(1), {.lr = 0.005, .betas = {0.8, 0.99}}}});
       }},
  };
}

std::vector<int> replica_counts() {
  std::vector<int> r;
  for (int k = 1; k <= world_size(); ++k)
    if (world_size() % k == 0) r.push_back(k);
  return r;
}

// One training step of every replica on its share of global batch `step`.
void train_step(Mlp& model, parallel::DataParallel<double>& dp, optim::Optimizer<double>& opt,
                const parallel::Replicas& replicas, int step) {
  const std::int64_t b = kGlobal / replicas.count();
  Tape tape;
  auto loss = loss_of(model, tape, step * kGlobal + replicas.index() * b, b);
  dp.backward(tape, loss);
  opt.step();
  opt.zero_grad();
}

std::vector<double> values(Mlp& model) {
  std::vector<double> all;
  for (auto& p : model.parameters()) {
    const auto v = p.value().local().to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " entry " << i;
}

// A small first bucket and small later ones, so that chunks cut through parameters.
constexpr parallel::DataParallelOptions kBuckets{.first_bucket_bytes = 64, .bucket_bytes = 256};

TEST(ShardedOptimizer, EveryOptimizerTrainsAsUnshardedDataParallelism) {
  for (const auto& c : optimizers()) {
    for (const int r : replica_counts()) {
      parallel::Replicas replicas(MPI_COMM_WORLD, r);
      Mlp plain(replicas.model_comm());
      parallel::DataParallel<double> plain_dp(plain, replicas, kBuckets);
      auto plain_opt = make_unsharded(plain, c);
      // Three steps: the buckets are rebuilt from the observed ready order after the first.
      for (int step = 0; step < 3; ++step) train_step(plain, plain_dp, *plain_opt, replicas, step);
      const auto want = values(plain);
      for (const int stage : {1, 2}) {
        Mlp model(replicas.model_comm());
        // Stage 1 over one group per layer: the reduction's order, so the result, does not
        // depend on the layout. Stage 2 over rebuilt buckets, whose owned gradients change place.
        parallel::DataParallelOptions options = kBuckets;
        if (stage == 1) options.grouping = parallel::DataParallelOptions::Grouping::layers;
        parallel::DataParallel<double> dp(model, replicas, options);
        const auto& reducer = parallel::detail::reducer_of(dp);
        auto opt_ptr =
            c.make_groups ? std::make_unique<parallel::ShardedOptimizer<double>>(
                                dp, stage, groups_of(model, c), c.make_groups)
                          : std::make_unique<parallel::ShardedOptimizer<double>>(dp, stage, c.make);
        parallel::ShardedOptimizer<double>& opt = *opt_ptr;
        for (int step = 0; step < 3; ++step) train_step(model, dp, opt, replicas, step);
        EXPECT_EQ(dp.buckets_rebuilt(), stage == 2);
        expect_close(
            values(model), want, 1e-13,
            c.name + ", " + std::to_string(r) + " replicas, stage " + std::to_string(stage));
        // The state is split: this rank's pieces of every parameter add up to 1/R of them
        // (each chunk is within one entry of N / R).
        std::int64_t held = 0, total = 0;
        for (std::size_t b = 0; b < reducer.bucket_count(); ++b) {
          const auto& bounds = reducer.chunk_bounds(b);
          held += bounds[static_cast<std::size_t>(replicas.index()) + 1] -
                  bounds[static_cast<std::size_t>(replicas.index())];
          total += bounds.back();
        }
        std::size_t per_param = 0;
        for (const auto& p : opt.shard_optimizer().state_dict().params) {
          std::size_t tensors = p.tensors.size();
          per_param = std::max(per_param, tensors);
        }
        EXPECT_EQ(opt.state_bytes(), static_cast<std::size_t>(held) * per_param * sizeof(double))
            << c.name;
        EXPECT_LE(held, total / r + static_cast<std::int64_t>(reducer.bucket_count()));
        // Gradient memory after the step, counted from the reducer's tensors: stage 1 keeps every
        // bucket whole and its receive buffer (R copies of the owned chunk), stage 2 only the
        // owned chunks (with one replica, the bucket whole), and the parameters no gradient.
        const std::int64_t grads = r == 1 ? total : (stage == 1 ? total + r * held : held);
        EXPECT_EQ(dp.gradient_bytes(), static_cast<std::size_t>(grads) * sizeof(double))
            << c.name << ", stage " << stage;
        EXPECT_GE(dp.peak_gradient_bytes(), dp.gradient_bytes());
        if (stage == 2 && r > 1) {
          for (const auto& p : model.parameters()) EXPECT_FALSE(p.has_grad());
        }
        // The state gathered from the replicas (collective) is the unsharded optimizer's.
        const auto a = opt.state_dict(), u = plain_opt->state_dict();
        ASSERT_EQ(a.params.size(), u.params.size());
        ASSERT_EQ(a.groups, u.groups);
        const auto params = plain_opt->parameters();  // the groups' order
        for (std::size_t i = 0; i < a.params.size(); ++i) {
          // A rank without a box of the parameter holds no state of it (io::save_checkpoint
          // takes a parameter's state from the ranks holding parts of it).
          if (params[i].value().local_numel() == 0) continue;
          EXPECT_EQ(a.params[i].scalars, u.params[i].scalars) << c.name << " parameter " << i;
          EXPECT_EQ(a.params[i].tensors.size(), u.params[i].tensors.size()) << c.name;
          for (const auto& [key, t] : u.params[i].tensors)
            if (a.params[i].tensors.count(key) != 0)
              expect_close(a.params[i].tensors.at(key).to_vector(), t.to_vector(), 1e-13,
                           c.name + " state " + key);
        }
      }
    }
  }
}

TEST(ShardedOptimizer, Stage2AccumulatesWholeGradientsOverMicroBatches) {
  // backward_no_sync keeps whole local gradients; the backward() that ends the accumulation
  // reduces their sums into the owned chunks, the same bits as the whole buckets' chunks, so the
  // result is unsharded training's.
  const Case adam = optimizers()[1];
  for (const int r : replica_counts()) {
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    const std::int64_t b = kGlobal / r, half = b / 2;
    if (b % 2 != 0) continue;
    std::vector<double> want;
    std::vector<std::vector<double>> chunks;  // unsharded: the owned chunks of the second step
    for (const int stage : {0, 2}) {
      Mlp model(replicas.model_comm());
      parallel::DataParallel<double> dp(model, replicas, kBuckets);
      const auto& reducer = parallel::detail::reducer_of(dp);
      std::unique_ptr<optim::Optimizer<double>> opt =
          stage == 0 ? adam.make(model.parameters())
                     : std::make_unique<parallel::ShardedOptimizer<double>>(dp, 2, adam.make);
      for (int step = 0; step < 2; ++step) {
        for (int micro = 0; micro < 2; ++micro) {
          Tape tape;
          auto loss =
              loss_of(model, tape, step * kGlobal + replicas.index() * b + micro * half, half);
          if (micro == 0) {
            dp.backward_no_sync(tape, loss);
            if (stage == 2 && r > 1) {  // the whole local gradients, beside the owned chunks
              std::size_t local = 0, owned = 0;
              for (const auto& p : model.parameters())
                local += static_cast<std::size_t>(p.value().local_numel());
              for (std::size_t k = 0; k < reducer.bucket_count(); ++k)
                owned += static_cast<std::size_t>(reducer.owned_gradient(k).numel());
              EXPECT_EQ(dp.gradient_bytes(), (local + owned) * sizeof(double));
            }
          } else {
            dp.backward(tape, loss);
            // At the second step, when both reducers have rebuilt their buckets (stage 2 at the
            // start of the pass, unsharded after the first).
            for (std::size_t k = 0; step == 1 && k < reducer.bucket_count(); ++k) {
              const auto got = reducer.owned_gradient(k).to_vector();
              if (stage == 0)
                chunks.push_back(got);
              else
                EXPECT_EQ(got, chunks.at(k)) << r << " replicas, bucket " << k;
            }
          }
        }
        opt->step();
        opt->zero_grad();
      }
      if (stage == 0)
        want = values(model);
      else
        expect_close(values(model), want, 1e-13, std::to_string(r) + " replicas, accumulated");
    }
  }
}

TEST(ShardedOptimizer, TheDocsExampleTrainsAsAdam) {
  parallel::Replicas replicas(MPI_COMM_WORLD, world_size());
  nn::Linear<float> model(8, 3, {.seed = 1}), plain(8, 3, {.seed = 1});
  // [sharded]
  parallel::DataParallel<float> dp(model, replicas);
  parallel::ShardedOptimizer<float> opt(dp, /*stage=*/2, [](std::vector<Var<float>> shards) {
    return std::make_unique<optim::Adam<float>>(std::move(shards), optim::AdamOptions{.lr = 1e-3});
  });
  // per step: dp.backward(tape, loss); opt.step(); opt.zero_grad();
  // [sharded]
  parallel::DataParallel<float> plain_dp(plain, replicas);
  optim::Adam<float> adam(plain.parameters(), {.lr = 1e-3});
  const std::vector<std::int32_t> labels{0, 1, 2, 1};
  for (int step = 0; step < 3; ++step) {
    DistTensor<float> x(TensorSpace(Shape{4, 8}, Partition::self(Shape{1, 1})));
    nn::uniform_init(x, static_cast<std::uint64_t>(100 * step + world_rank()), 1.0);
    for (auto* m : {&model, &plain}) {
      Tape tape;
      auto loss = loss::cross_entropy(tape, m->forward(tape, Var<float>(x)), labels);
      (m == &model ? dp : plain_dp).backward(tape, loss);
      optim::Optimizer<float>& o = m == &model ? static_cast<optim::Optimizer<float>&>(opt) : adam;
      o.step();
      o.zero_grad();
    }
  }
  const auto a = model.parameters(), b = plain.parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].value().local().to_vector(), b[i].value().local().to_vector()) << i;
}

// This rank's state of `opt` (every tensor and scalar of the parameters of which it holds a box),
// compared with `want` to `tol`.
void expect_state_close(const optim::OptimizerState<double>& got,
                        const optim::OptimizerState<double>& want,
                        const std::vector<Var<double>>& params, const std::string& what) {
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  ASSERT_EQ(got.groups, want.groups) << what;
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    if (params[i].value().local_numel() == 0) continue;
    EXPECT_EQ(got.params[i].scalars, want.params[i].scalars) << what << " parameter " << i;
    ASSERT_EQ(got.params[i].tensors.size(), want.params[i].tensors.size()) << what;
    for (const auto& [key, t] : want.params[i].tensors) {
      ASSERT_EQ(got.params[i].tensors.count(key), 1u) << what << " " << key;
      expect_close(got.params[i].tensors.at(key).to_vector(), t.to_vector(), 1e-13,
                   what + " state " + key);
    }
  }
}

TEST(ShardedOptimizer, StateDictIsTheCurrentUnshardedStateAfterEveryStep) {
  // state_dict() gathers the shards itself (collective over the replicas): right after each step,
  // with nothing else called first, it is the unsharded optimizer's state of the same steps.
  parallel::Replicas replicas(MPI_COMM_WORLD, world_size());
  Mlp model(replicas.model_comm()), plain(replicas.model_comm());
  parallel::DataParallel<double> dp(model, replicas, kBuckets);
  parallel::DataParallel<double> plain_dp(plain, replicas, kBuckets);
  parallel::ShardedOptimizer<double> opt(dp, 2, optimizers()[1].make);
  auto adam = optimizers()[1].make(plain.parameters());
  for (int step = 0; step < 2; ++step) {
    train_step(model, dp, opt, replicas, step);
    train_step(plain, plain_dp, *adam, replicas, step);
    expect_state_close(opt.state_dict(), adam->state_dict(), plain.parameters(),
                       "after step " + std::to_string(step));
  }
  EXPECT_THROW(parallel::ShardedOptimizer<double>(dp, 3, optimizers()[1].make), Error);
  // Groups of Vars that are not the model's parameters, or a factory of another group count.
  Mlp other(replicas.model_comm());
  EXPECT_THROW(
      parallel::ShardedOptimizer<double>(dp, 2, {other.parameters()}, optimizers()[0].make_groups),
      Error);
  const GroupFactory one_group = [](std::vector<std::vector<Var<double>>> g) {
    return std::make_unique<optim::SGD<double>>(g.at(0));
  };
  EXPECT_THROW(parallel::ShardedOptimizer<double>(
                   dp, 2, {{model.parameters()[0]}, {model.parameters()[1]}}, one_group),
               Error);
  // Two groups with options of their own (the docs' example), stepping after the first optimizer.
  // [groups]
  const auto p = model.parameters();  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
  parallel::ShardedOptimizer<double> grouped(
      dp, /*stage=*/2, {{p[2], p[3]}, {p[0], p[1]}},
      [](std::vector<std::vector<Var<double>>> g) -> std::unique_ptr<optim::Optimizer<double>> {
        using Group = optim::SGD<double>::Group;
        return std::make_unique<optim::SGD<double>>(std::vector<Group>{
            {g.at(0), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}},
            {g.at(1), {.lr = 0.2, .momentum = 0.5, .weight_decay = 1e-3}}});
      });
  // [groups]
  EXPECT_EQ(grouped.group_count(), 2u);
  EXPECT_EQ(grouped.lr(1), 0.2);
  EXPECT_EQ(grouped.group_options(0).at("nesterov"), 1.0);
  train_step(model, dp, grouped, replicas, 2);
  const auto state = grouped.state_dict();
  ASSERT_EQ(state.params.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i)  // SGD with momentum: each stepped parameter's buffer
    EXPECT_EQ(state.params[i].tensors.count("momentum_buffer"), 1u) << i;
}

// A directory that every rank sees: made by rank 0, its path broadcast.
class SharedDir {
 public:
  SharedDir() {
    if (world_rank() == 0) dir_ = std::make_unique<test::TempDir>("distop_sharded");
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

TEST(ShardedOptimizer, ACheckpointAtTwoReplicasContinuesAtOtherCounts) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even rank count";
  const auto cases = optimizers();
  const Case& adam = cases[2];  // AdamW with amsgrad: three state tensors and a step
  SharedDir dir;
  {  // two steps at 2 replicas, stage 2, checkpointed
    parallel::Replicas replicas(MPI_COMM_WORLD, 2);
    Mlp model(replicas.model_comm());
    parallel::DataParallel<double> dp(model, replicas, kBuckets);
    parallel::ShardedOptimizer<double> opt(dp, 2, adam.make);
    for (int step = 0; step < 2; ++step) train_step(model, dp, opt, replicas, step);
    // Every rank of every replica (the state is gathered from the shards); replica 0 writes.
    io::save_checkpoint(dir.str(), dp, opt, {.global_step = 2});
  }
  for (const int r : replica_counts()) {
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    // Unsharded, loaded from the same checkpoint: the reference for two more steps.
    Mlp plain(replicas.model_comm());
    parallel::DataParallel<double> plain_dp(plain, replicas, kBuckets);
    auto plain_opt = adam.make(plain.parameters());
    io::load_checkpoint(dir.str(), plain_dp, *plain_opt);
    for (int step = 2; step < 4; ++step) train_step(plain, plain_dp, *plain_opt, replicas, step);
    for (const int stage : {1, 2}) {
      Mlp model(replicas.model_comm());
      parallel::DataParallel<double> dp(model, replicas, kBuckets);
      parallel::ShardedOptimizer<double> opt(dp, stage, adam.make);
      const auto info = io::load_checkpoint(dir.str(), dp, opt);
      EXPECT_EQ(info.global_step, 2);
      for (int step = 2; step < 4; ++step) train_step(model, dp, opt, replicas, step);
      expect_close(values(model), values(plain), 1e-13,
                   "resumed at " + std::to_string(r) + " replicas, stage " + std::to_string(stage));
    }
  }
}

}  // namespace
