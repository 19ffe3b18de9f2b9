// DataParallel's gradient reduction (its reducer's buckets, read through the internal header):
// replicas of a model (alone, or each itself partitioned) end every backward pass with the gradient
// of the mean loss over the global batch, the one-rank model's gradient, whatever the bucketing,
// with overlap or without, and with accumulation over micro-batches.
#include "gradient_reducer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/dist/assemble.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/nn/linear.hpp"
#include "distop/parallel/data_parallel.hpp"
#include "mpi_test_util.hpp"
#include "replica_mlp.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

constexpr std::uint64_t kSeed = 3, kDataSeed = 77;

using Mlp = distop::test::ReplicaMlp;

// The loss of examples [first, first + batch) on `model`, recorded on `tape`.
Var<double> loss_of(Mlp& model, Tape& tape, std::int64_t first, std::int64_t batch) {
  return distop::test::replica_mlp_loss(model, tape, kDataSeed, first, batch);
}

// The gradients of the one-rank model over the whole global batch, by name.
std::map<std::string, std::vector<double>> reference(std::int64_t batch) {
  Mlp model(MPI_COMM_SELF, kSeed);
  Tape tape;
  auto loss = loss_of(model, tape, 0, batch);
  backward(tape, loss);
  std::map<std::string, std::vector<double>> g;
  for (auto& p : model.named_parameters()) g[p.name] = p.var.grad().local().to_vector();
  return g;
}

// This rank's box of each parameter's global gradient `global` (a [out, in] or [out] tensor).
std::vector<double> box_of(const Var<double>& p, const std::vector<double>& global) {
  DistTensor<double> box(p.space());
  distribute(global, box);
  return box.local().to_vector();
}

void expect_reference_gradients(Mlp& model, const std::map<std::string, std::vector<double>>& ref,
                                const std::string& what) {
  for (auto& p : model.named_parameters()) {
    ASSERT_TRUE(p.var.has_grad()) << what << ": " << p.name;
    const auto want = box_of(p.var, ref.at(p.name));
    const auto got = p.var.grad().local().to_vector();
    ASSERT_EQ(got.size(), want.size()) << what << ": " << p.name;
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i])))
          << what << ": " << p.name << " entry " << i;
  }
}

// Every (replicas) layout of the world's ranks: R divides P.
std::vector<int> replica_counts() {
  std::vector<int> r;
  for (int k = 1; k <= world_size(); ++k)
    if (world_size() % k == 0) r.push_back(k);
  return r;
}

TEST(GradientReducer, ReplicasEndWithTheGlobalBatchGradient) {
  const std::int64_t global = 24;  // divisible by 1..4
  const auto ref = reference(global);
  for (const int r : replica_counts()) {
    for (const bool overlap : {true, false}) {
      for (const auto grouping : {parallel::DataParallelOptions::Grouping::buckets,
                                  parallel::DataParallelOptions::Grouping::layers}) {
        parallel::Replicas replicas(MPI_COMM_WORLD, r);
        Mlp model(replicas.model_comm(), kSeed);
        parallel::DataParallel<double> dp(model, replicas,
                                          {.first_bucket_bytes = 64,
                                           .bucket_bytes = 256,
                                           .grouping = grouping,
                                           .overlap = overlap});
        const std::int64_t b = global / r;
        for (int step = 0; step < 2; ++step) {  // the second pass runs on the rebuilt buckets
          Tape tape;
          auto loss = loss_of(model, tape, replicas.index() * b, b);
          dp.backward(tape, loss);
          const std::string what = std::to_string(r) + " replicas, overlap " +
                                   std::to_string(overlap) + ", step " + std::to_string(step);
          expect_reference_gradients(model, ref, what);
          for (auto& p : model.parameters()) p.zero_grad();
        }
        if (grouping == parallel::DataParallelOptions::Grouping::buckets) {
          EXPECT_TRUE(dp.buckets_rebuilt());
        }
      }
    }
  }
}

// Every parameter's gradient box on this rank, concatenated in named_parameters() order.
std::vector<double> all_gradients(Mlp& model) {
  std::vector<double> all;
  for (auto& p : model.parameters()) {
    const auto g = p.grad().local().to_vector();
    all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}

// The replicas' mean gradient as a sequential program computes it: every replica's own gradient
// (plain backward on its rows), gathered, added in replica order g_0 + g_1 + ... + g_{R-1} entry
// by entry, times 1/R.
std::vector<double> sequential_mean(const parallel::Replicas& replicas, std::int64_t batch) {
  Mlp model(replicas.model_comm(), kSeed);
  Tape tape;
  auto loss = loss_of(model, tape, replicas.index() * batch, batch);
  backward(tape, loss);
  const auto mine = all_gradients(model);
  const int r = replicas.count();
  const int n = static_cast<int>(mine.size());
  std::vector<double> every(mine.size() * static_cast<std::size_t>(r));
  MPI_Allgather(mine.data(), n, MPI_DOUBLE, every.data(), n, MPI_DOUBLE, replicas.reduction_comm());
  std::vector<double> sum(every.begin(), every.begin() + n);
  for (int q = 1; q < r; ++q)
    for (int i = 0; i < n; ++i)
      sum[static_cast<std::size_t>(i)] += every[static_cast<std::size_t>(q * n + i)];
  for (auto& v : sum) v *= 1.0 / r;
  return sum;
}

TEST(GradientReducer, TheBucketingDoesNotChangeABit) {
  // At every replica count the sum runs in replica order, entry by entry: every bucket size,
  // grouping and overlap gives the bits of the sequential sum.
  for (const int r : replica_counts()) {
    if (r == 1) continue;
    const std::int64_t b = 24 / r;
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    const auto want = sequential_mean(replicas, b);
    for (const auto grouping : {parallel::DataParallelOptions::Grouping::buckets,
                                parallel::DataParallelOptions::Grouping::layers}) {
      for (const std::size_t cap : {std::size_t{8}, std::size_t{200}, std::size_t{1} << 20}) {
        for (const bool overlap : {true, false}) {
          Mlp model(replicas.model_comm(), kSeed);
          parallel::DataParallel<double> dp(model, replicas,
                                            {.first_bucket_bytes = cap,
                                             .bucket_bytes = cap,
                                             .grouping = grouping,
                                             .overlap = overlap});
          for (int step = 0; step < 2; ++step) {  // the second pass runs on the rebuilt buckets
            Tape tape;
            auto loss = loss_of(model, tape, replicas.index() * b, b);
            dp.backward(tape, loss);
            EXPECT_EQ(all_gradients(model), want)
                << r << " replicas, cap " << cap << ", grouping "
                << (grouping == parallel::DataParallelOptions::Grouping::buckets ? "buckets"
                                                                                 : "layers")
                << ", overlap " << overlap << ", step " << step;
            for (auto& p : model.parameters()) p.zero_grad();
          }
          if (cap == 8 && overlap && grouping == parallel::DataParallelOptions::Grouping::buckets) {
            std::size_t held = 0;  // parameters of which this rank holds a box
            for (auto& p : model.parameters()) held += p.value().local_numel() > 0 ? 1 : 0;
            EXPECT_GE(dp.buckets().size(), held) << "one parameter a bucket";
            EXPECT_GT(dp.last_overlapped_buckets(), 0u) << "no bucket started during backward";
          }
        }
      }
    }
  }
}

TEST(GradientReducer, ThePairwiseExchangeGivesTheCollectivesBits) {
  // The exchange only moves chunks: pairwise rounds with windows of 1 and 2 rounds, and the
  // automatic choice (pairwise once R - 1 exceeds the window), give the sequential sum's bits, with
  // whole buckets and with sharded gradients (ZeRO stage 2: the owned chunks).
  using Exchange = parallel::DataParallelOptions::Exchange;
  for (const int r : replica_counts()) {
    if (r == 1) continue;
    const std::int64_t b = 24 / r;
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    const auto want = sequential_mean(replicas, b);
    for (const auto exchange : {Exchange::collective, Exchange::pairwise, Exchange::automatic}) {
      for (const int window : {1, 2}) {
        if (exchange == Exchange::collective && window == 2) continue;  // the window is unused
        for (const std::size_t cap : {std::size_t{8}, std::size_t{1} << 20}) {
          Mlp model(replicas.model_comm(), kSeed);
          parallel::DataParallel<double> dp(model, replicas,
                                            {.first_bucket_bytes = cap,
                                             .bucket_bytes = cap,
                                             .exchange = exchange,
                                             .exchange_window = window});
          auto& reducer = parallel::detail::reducer_of(dp);
          const std::string what = std::to_string(r) + " replicas, exchange " +
                                   std::to_string(static_cast<int>(exchange)) + ", window " +
                                   std::to_string(window) + ", cap " + std::to_string(cap);
          Tape tape;
          auto loss = loss_of(model, tape, replicas.index() * b, b);
          dp.backward(tape, loss);
          EXPECT_EQ(all_gradients(model), want) << what;
          for (auto& p : model.parameters()) p.zero_grad();
          // Sharded: each owned chunk holds the same bits as the whole bucket's chunk did.
          std::vector<std::vector<double>> whole;
          for (std::size_t k = 0; k < reducer.bucket_count(); ++k)
            whole.push_back(reducer.owned_gradient(k).to_vector());
          reducer.set_shard_gradients(true);
          Tape tape2;
          auto loss2 = loss_of(model, tape2, replicas.index() * b, b);
          dp.backward(tape2, loss2);
          for (std::size_t k = 0; k < reducer.bucket_count(); ++k) {
            if (reducer.bucket_sharded(k)) {
              EXPECT_EQ(reducer.owned_gradient(k).to_vector(), whole[k])
                  << what << ", bucket " << k;
            }
          }
        }
      }
    }
  }
  parallel::Replicas replicas(MPI_COMM_WORLD, world_size());
  Mlp model(replicas.model_comm(), kSeed);
  EXPECT_THROW(parallel::DataParallel<double>(model, replicas, {.exchange_window = 0}),
               distop::Error);
}

TEST(GradientReducer, WithoutTheGatherOnlyTheOwnedChunkIsTheMean) {
  // ZeRO stage 2's reduction: each replica ends with the mean on its own chunk of every bucket.
  for (const int r : replica_counts()) {
    if (r == 1) continue;
    const std::int64_t b = 24 / r;
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    Mlp full(replicas.model_comm(), kSeed), sharded(replicas.model_comm(), kSeed);
    parallel::DataParallel<double> dp_full(full, replicas,
                                           {.first_bucket_bytes = 64, .bucket_bytes = 256});
    parallel::DataParallel<double> dp_sharded(sharded, replicas,
                                              {.first_bucket_bytes = 64, .bucket_bytes = 256});
    auto& a = parallel::detail::reducer_of(dp_full);
    auto& c = parallel::detail::reducer_of(dp_sharded);
    c.set_gather_gradients(false);
    for (auto* dp : {&dp_full, &dp_sharded}) {
      Tape tape;
      auto loss = loss_of(dp == &dp_full ? full : sharded, tape, replicas.index() * b, b);
      dp->backward(tape, loss);
    }
    ASSERT_EQ(a.bucket_count(), c.bucket_count());
    std::size_t compared = 0;
    for (std::size_t k = 0; k < c.bucket_count(); ++k) {
      const auto& bounds = c.chunk_bounds(k);
      const auto whole = a.bucket_buffer(k).to_vector();
      const auto mine = c.bucket_buffer(k).to_vector();
      ASSERT_EQ(whole.size(), mine.size());
      for (auto i = bounds[static_cast<std::size_t>(replicas.index())];
           i < bounds[static_cast<std::size_t>(replicas.index()) + 1]; ++i, ++compared)
        EXPECT_EQ(mine[static_cast<std::size_t>(i)], whole[static_cast<std::size_t>(i)])
            << k << " " << i;
    }
    EXPECT_GT(compared, 0u);
  }
}

TEST(GradientReducer, AccumulationOverMicroBatchesEqualsOneBatch) {
  const std::int64_t global = 24;
  const auto ref = reference(global);
  for (const int r : replica_counts()) {
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    Mlp model(replicas.model_comm(), kSeed);
    parallel::DataParallel<double> dp(model, replicas);
    const std::int64_t b = global / r, half = b / 2;
    if (b % 2 != 0) continue;
    // Two micro-batches of half the replica's rows, the first without reduction.
    for (int micro = 0; micro < 2; ++micro) {
      Tape tape;
      auto loss = loss_of(model, tape, replicas.index() * b + micro * half, half);
      if (micro == 0)
        dp.backward_no_sync(tape, loss);
      else
        dp.backward(tape, loss);
    }
    // backward seeds dL = 1 for each half: the sum of the two halves' mean gradients, twice the
    // mean over the replica's rows.
    for (auto& p : model.parameters())
      if (p.grad().local_numel() > 0) kernels::scale(0.5, p.grad().local());
    expect_reference_gradients(model, ref, std::to_string(r) + " replicas, accumulated");
  }
}

TEST(GradientReducer, BroadcastMakesEveryReplicaStartFromReplicaZero) {
  for (const int r : replica_counts()) {
    parallel::Replicas replicas(MPI_COMM_WORLD, r);
    Mlp model(replicas.model_comm(), kSeed + 100 * static_cast<std::uint64_t>(replicas.index()));
    Mlp zero(replicas.model_comm(), kSeed);
    const auto expect_replica_zero = [&](const std::string& when) {
      const auto a = model.parameters(), b = zero.parameters();
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(a[i].value().local().to_vector(), b[i].value().local().to_vector())
            << r << " replicas, " << when << ", parameter " << i;
    };
    // Construction broadcasts replica 0's parameters and buffers.
    parallel::DataParallel<double> dp(model, replicas);
    expect_replica_zero("after construction");
    // broadcast_state() again, after the other replicas' parameters changed.
    for (auto& p : model.parameters())
      if (replicas.index() != 0 && p.value().local_numel() > 0)
        p.value().local().fill(static_cast<double>(replicas.index()) + 0.5);
    dp.broadcast_state();
    expect_replica_zero("after broadcast_state");
  }
}

TEST(GradientReducer, ReplicaCountsThatDoNotDivideTheRanksAreErrors) {
  EXPECT_THROW(parallel::Replicas(MPI_COMM_WORLD, world_size() + 1), Error);
  EXPECT_THROW(parallel::Replicas(MPI_COMM_WORLD, 0), Error);
}

}  // namespace
