// The contrastive losses across ranks: every loss x strategy, balanced and unbalanced row blocks (a
// rank with no rows, a gather root with no rows), float and double, against the one-rank loss of
// the whole batch: the components over the loss's partition (every rank) sum to its loss, backward
// seeded 1 gives its gradients; the scalar gradients' 1/P shares and the seed P a data-parallel
// average needs; errors agreed on every rank.
#include "distop/loss/contrastive.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/loss/total.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Var;
namespace loss = distop::loss;
namespace test = distop::test;
using loss::ContrastiveOptions;
using loss::ContrastiveStrategy;

enum class Which { ntxent, clip, siglip };
const char* name_of(Which w) {
  return w == Which::ntxent ? "ntxent" : w == Which::clip ? "clip" : "siglip";
}

constexpr std::int64_t kDim = 5;

template <class T>
Var<T> scalar(double v) {
  DistTensor<T> x(test::local_space(Shape{1}));
  x.local().fill(static_cast<T>(v));
  return Var<T>(x, true);
}

template <class T>
Var<T> rows_of(const std::vector<T>& all, std::int64_t first, std::int64_t n) {
  DistTensor<T> x(test::local_batch_space(n, kDim));
  std::vector<T> part(all.begin() + first * kDim, all.begin() + (first + n) * kDim);
  if (n > 0) x.local().copy_from(distop::Tensor<T>::from_vector(Shape{n, kDim}, part));
  return Var<T>(x, true);
}

// The loss (loss::total, on every rank), this rank's component and the ranks the loss's
// partition spans, dL/da, dL/db (this rank's rows), dL/dlog_scale and dL/dbias (this rank's
// copies).
struct Result {
  double loss;
  double component;
  int ranks;
  std::vector<double> ga, gb;
  double gt = 0, gbias = 0;
};

template <class T>
Result run(Which w, const std::vector<T>& a_all, const std::vector<T>& b_all, std::int64_t first,
           std::int64_t n, MPI_Comm comm, const ContrastiveOptions& opt, double seed = 1) {
  auto a = rows_of(a_all, first, n), b = rows_of(b_all, first, n);
  auto t = scalar<T>(1.1), bias = scalar<T>(-2.0);
  Tape tape;
  Var<T> l = w == Which::ntxent ? loss::ntxent(tape, a, b, T(0.4), comm, opt)
             : w == Which::clip ? loss::clip_loss(tape, a, b, t, comm, opt)
                                : loss::siglip_loss(tape, a, b, t, bias, comm, opt);
  Result r;
  r.loss = loss::total(l);
  r.component = l.value().local().to_vector().at(0);
  r.ranks = l.space().partition().size();
  DistTensor<T> s(l.space());
  s.local().fill(static_cast<T>(seed));
  distop::backward(tape, l, s);
  for (T v : a.grad().local().to_vector()) r.ga.push_back(v);
  for (T v : b.grad().local().to_vector()) r.gb.push_back(v);
  if (w != Which::ntxent) r.gt = t.grad().local().to_vector()[0];
  if (w == Which::siglip) r.gbias = bias.grad().local().to_vector()[0];
  return r;
}

double sum_over_ranks(double v) {
  double s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

// Rows per rank: balanced, growing with the rank, and rank 0 holding none.
std::vector<std::vector<std::int64_t>> splits(int p) {
  std::vector<std::int64_t> balanced(p, 3), growing, empty_first;
  for (int c = 0; c < p; ++c) growing.push_back(c + 1);
  for (int c = 0; c < p; ++c) empty_first.push_back(c == 0 && p > 1 ? 0 : 2 + c % 2);
  return {balanced, growing, empty_first};
}

template <class T>
void check_all(double tol) {
  const int p = test::world_size(), me = test::world_rank();
  for (const auto& rows : splits(p)) {
    std::int64_t total = 0, first = 0;
    for (int c = 0; c < p; ++c) {
      if (c < me) first += rows[c];
      total += rows[c];
    }
    const auto a_all =
        test::random_tensor<T>(test::local_batch_space(total, kDim), 11).local().to_vector();
    const auto b_all =
        test::random_tensor<T>(test::local_batch_space(total, kDim), 12).local().to_vector();
    for (Which w : {Which::ntxent, Which::clip, Which::siglip}) {
      const Result ref = run(w, a_all, b_all, 0, total, MPI_COMM_SELF, ContrastiveOptions{});
      for (ContrastiveStrategy st :
           {ContrastiveStrategy::allgather_nograd, ContrastiveStrategy::gather,
            ContrastiveStrategy::allgather, ContrastiveStrategy::ring}) {
        SCOPED_TRACE(std::string(name_of(w)) + " " + std::string(loss::strategy_name(st)) +
                     ", rank 0 holds " + std::to_string(rows[0]) + " rows");
        const ContrastiveOptions opt{st, 0, true};
        const Result got = run(w, a_all, b_all, first, rows[me], MPI_COMM_WORLD, opt);
        EXPECT_NEAR(got.loss, ref.loss, tol * std::abs(ref.loss));
        ASSERT_EQ(got.ga.size(), static_cast<std::size_t>(rows[me] * kDim));
        for (std::size_t k = 0; k < got.ga.size(); ++k) {
          EXPECT_NEAR(got.ga[k], ref.ga[first * kDim + k], tol * 10) << "a entry " << k;
          EXPECT_NEAR(got.gb[k], ref.gb[first * kDim + k], tol * 10) << "b entry " << k;
        }
        // Each copy of a scalar parameter holds 1/P of its gradient; they sum to the gradient.
        EXPECT_NEAR(got.gt, ref.gt / p, tol * 10);
        EXPECT_NEAR(got.gbias, ref.gbias / p, tol * 10);
        EXPECT_NEAR(sum_over_ranks(got.gt), ref.gt, tol * 10);
        // The loss's partition spans every rank, each holding its component: the part of the loss
        // from its own rows (none: 0), or under gather the whole loss on the root and 0 elsewhere.
        EXPECT_EQ(got.ranks, p);
        EXPECT_NEAR(sum_over_ranks(got.component), got.loss, 1e-14 * std::abs(got.loss));
        if (st == ContrastiveStrategy::gather)
          EXPECT_EQ(got.component, me == 0 ? got.loss : 0.0);
        else if (rows[me] == 0)
          EXPECT_EQ(got.component, 0.0);
        else
          EXPECT_GE(got.component, 0.0);  // every row's term is (one row alone: 0)
      }
    }
  }
}

TEST(ContrastiveAcrossRanks, EveryStrategyGivesTheOneRankLossAndGradientsDouble) {
  check_all<double>(1e-12);
}

TEST(ContrastiveAcrossRanks, EveryStrategyGivesTheOneRankLossAndGradientsFloat) {
  check_all<float>(2e-5);
}

// The gather root may hold no rows, and be any rank.
TEST(ContrastiveAcrossRanks, GatherToARootWithoutRows) {
  const int p = test::world_size(), me = test::world_rank();
  const int root = p - 1;
  std::vector<std::int64_t> rows(p, 2);
  if (p > 1) rows[root] = 0;
  std::int64_t total = 0, first = 0;
  for (int c = 0; c < p; ++c) {
    if (c < me) first += rows[c];
    total += rows[c];
  }
  const auto a_all =
      test::random_tensor<double>(test::local_batch_space(total, kDim), 3).local().to_vector();
  const auto b_all =
      test::random_tensor<double>(test::local_batch_space(total, kDim), 4).local().to_vector();
  const Result ref = run(Which::clip, a_all, b_all, 0, total, MPI_COMM_SELF, ContrastiveOptions{});
  const Result got = run(Which::clip, a_all, b_all, first, rows[me], MPI_COMM_WORLD,
                         ContrastiveOptions{ContrastiveStrategy::gather, root, true});
  EXPECT_NEAR(got.loss, ref.loss, 1e-12 * ref.loss);
  for (std::size_t k = 0; k < got.ga.size(); ++k)
    EXPECT_NEAR(got.ga[k], ref.ga[first * kDim + k], 1e-11);
  EXPECT_NEAR(sum_over_ranks(got.gt), ref.gt, 1e-11);
}

// A data-parallel program averaging gradients over the P ranks seeds backward with P: the averaged
// gradients of every input are then those of the one-rank loss.
TEST(ContrastiveAcrossRanks, SeedPThenAverageGivesTheGradient) {
  const int p = test::world_size(), me = test::world_rank();
  const std::int64_t total = 2 * p;
  const auto a_all =
      test::random_tensor<double>(test::local_batch_space(total, kDim), 5).local().to_vector();
  const auto b_all =
      test::random_tensor<double>(test::local_batch_space(total, kDim), 6).local().to_vector();
  const Result ref =
      run(Which::siglip, a_all, b_all, 0, total, MPI_COMM_SELF, ContrastiveOptions{});
  for (ContrastiveStrategy st :
       {ContrastiveStrategy::allgather_nograd, ContrastiveStrategy::ring}) {
    const Result got = run(Which::siglip, a_all, b_all, 2 * me, 2, MPI_COMM_WORLD,
                           ContrastiveOptions{st, 0, true}, p);
    EXPECT_NEAR(sum_over_ranks(got.gt) / p, ref.gt, 1e-11);
    EXPECT_NEAR(sum_over_ranks(got.gbias) / p, ref.gbias, 1e-11);
    // Row gradients are P times the rank's own rows' gradient: averaged parameter gradients
    // (sums over each rank's rows, divided by P) come out right.
    for (std::size_t k = 0; k < got.ga.size(); ++k)
      EXPECT_NEAR(got.ga[k] / p, ref.ga[2 * me * kDim + k], 1e-11);
  }
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// This process's peak resident set in KiB since the last reset_peak().
long peak_kib(const char* field = "VmHWM") {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + key.size());
  return -1;
}
bool reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return static_cast<bool>(out);
}
#endif

// The ring keeps tiles of at most 1024 columns: it never holds this rank's b x B logits, which the
// all-gather strategy stores. Measured as the growth of the peak resident set.
TEST(ContrastiveAcrossRanks, RingNeverHoldsTheLogits) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "resident-set figures mean little under a sanitizer's allocator";
#else
  const int p = test::world_size();
  if (p > 2) GTEST_SKIP() << "sized for 1 or 2 ranks";
  const std::int64_t batch = 2048, d = 8, rows = batch / p;
  // CLIP's logits: rows x B for the rows' terms and as many for the columns' (32 or 16 MiB).
  const double logits_kib = 2.0 * double(rows) * batch * sizeof(float) / 1024;
  auto grows = [&](ContrastiveStrategy st) {
    Var<float> a(test::random_tensor<float>(test::local_batch_space(rows, d), 1), true);
    Var<float> b(test::random_tensor<float>(test::local_batch_space(rows, d), 2), true);
    auto t = scalar<float>(1.0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (!reset_peak()) return -1.0;
    const long before = peak_kib("VmRSS");
    {
      Tape tape;
      auto l = loss::clip_loss(tape, a, b, t, MPI_COMM_WORLD, ContrastiveOptions{st, 0, true});
      distop::backward(tape, l);
    }
    return double(peak_kib() - before);
  };
  const double ring = grows(ContrastiveStrategy::ring);
  if (ring < 0) GTEST_SKIP() << "/proc/self/clear_refs cannot be written here";
  const double allgather = grows(ContrastiveStrategy::allgather);
  EXPECT_LT(ring, logits_kib / 2) << "the ring's peak grew by " << ring << " KiB";
  EXPECT_GT(allgather, logits_kib)
      << "the all-gather strategy's peak grew by " << allgather << " KiB";
#endif
}

// A rank whose embeddings have another dimension makes every rank throw the same error.
TEST(ContrastiveAcrossRanks, ErrorsAgreeOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int me = test::world_rank();
  const std::int64_t d = me == test::world_size() - 1 ? 4 : 3;
  Var<double> a(test::random_tensor<double>(test::local_batch_space(2, d), 1), true);
  Var<double> b(test::random_tensor<double>(test::local_batch_space(2, d), 2), true);
  Tape tape;
  const std::string what = test::error_of([&] { loss::ntxent(tape, a, b, 0.5, MPI_COMM_WORLD); });
  EXPECT_NE(what.find("dimension"), std::string::npos) << what;
}

}  // namespace
