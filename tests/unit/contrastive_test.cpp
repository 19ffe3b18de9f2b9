// The contrastive losses on one rank (MPI_COMM_SELF): values against the definitions written out
// naively in double, gradients against finite differences, stability at scale 100 in float, CLIP's
// clamp, and the strategy names. tests/mpi/contrastive_test.cpp checks the strategies across ranks.
#include "distop/loss/contrastive.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../src/loss/contrastive_kernels.hpp"
#include "distop/core/error.hpp"
#include "gradcheck.hpp"

// The row kernels also run in a second memory space: in a host build Kokkos' LogicalMemorySpace
// over HostSpace (as memory_space_test.cpp does; Kokkos has it before 4.3), which the kernels
// treat as they treat a device space; in a device build the default space is the device itself.
#if KOKKOS_VERSION < 40300 && !DISTOP_DEVICE_MEMORY_SPACE
#define DISTOP_CONTRASTIVE_SECOND_SPACE 1
namespace {
struct ContrastiveSpaceName {
  static constexpr const char* get_name() { return "DistopContrastiveTestSpace"; }
};
using SecondSpace =
    Kokkos::Experimental::LogicalMemorySpace<Kokkos::HostSpace, void, ContrastiveSpaceName>;
}  // namespace
// Kokkos 3.4 finds two equally good partial specialisations of MemorySpaceAccess between
// AnonymousSpace and a LogicalMemorySpace (memory_space_test.cpp); these name the answer.
namespace Kokkos::Impl {
template <>
struct MemorySpaceAccess<Kokkos::AnonymousSpace, SecondSpace> {
  enum : bool { assignable = true, accessible = true, deepcopy = true };
};
template <>
struct MemorySpaceAccess<SecondSpace, Kokkos::AnonymousSpace> {
  enum : bool { assignable = true, accessible = true, deepcopy = true };
};
}  // namespace Kokkos::Impl
#else
#define DISTOP_CONTRASTIVE_SECOND_SPACE 0
#endif

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
namespace loss = distop::loss;
namespace test = distop::test;
using loss::ContrastiveOptions;
using loss::ContrastiveStrategy;

using Rows = std::vector<std::vector<double>>;

Rows rows_of(const Var<double>& x) {
  const auto v = x.value().local().to_vector();
  const std::int64_t d = x.value().local().extent(1);
  Rows r(v.size() / d);
  for (std::size_t i = 0; i < r.size(); ++i) {
    r[i].assign(v.begin() + i * d, v.begin() + (i + 1) * d);
    double n = 0;
    for (double e : r[i]) n += e * e;
    for (double& e : r[i]) e /= std::max(std::sqrt(n), 1e-12);
  }
  return r;
}

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0;
  for (std::size_t k = 0; k < x.size(); ++k) s += x[k] * y[k];
  return s;
}

// The definitions, naively (plain exp, no max shift), after normalising the rows.
double naive_ntxent(const Rows& a, const Rows& b, double tau) {
  Rows z = a;
  z.insert(z.end(), b.begin(), b.end());
  const std::size_t n = z.size(), half = a.size();
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double den = 0;
    for (std::size_t j = 0; j < n; ++j)
      if (j != i) den += std::exp(dot(z[i], z[j]) / tau);
    total += std::log(den) - dot(z[i], z[(i + half) % n]) / tau;
  }
  return total / n;
}

double naive_clip(const Rows& a, const Rows& b, double log_scale) {
  const double s = std::exp(std::min(log_scale, std::log(100.0)));
  const std::size_t n = a.size();
  double rows = 0, cols = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double dr = 0, dc = 0;
    for (std::size_t j = 0; j < n; ++j) {
      dr += std::exp(s * dot(a[i], b[j]));
      dc += std::exp(s * dot(a[j], b[i]));
    }
    rows += std::log(dr) - s * dot(a[i], b[i]);
    cols += std::log(dc) - s * dot(a[i], b[i]);
  }
  return 0.5 * (rows / n + cols / n);
}

double naive_siglip(const Rows& a, const Rows& b, double log_scale, double bias) {
  const double s = std::exp(log_scale);
  double total = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < b.size(); ++j) {
      const double z = i == j ? 1.0 : -1.0;
      total += std::log(1 + std::exp(-z * (s * dot(a[i], b[j]) + bias)));
    }
  return total / a.size();
}

template <class T>
Var<T> embeddings(std::int64_t n, std::int64_t d, std::uint64_t seed) {
  return Var<T>(test::random_tensor<T>(test::local_batch_space(n, d), seed), true);
}

template <class T>
Var<T> scalar(double v) {
  DistTensor<T> x(test::local_space(Shape{1}));
  x.local().fill(static_cast<T>(v));
  return Var<T>(x, true);
}

ContrastiveOptions one_rank() {
  return ContrastiveOptions{ContrastiveStrategy::allgather, 0, true};
}

TEST(Contrastive, ValuesMatchTheDefinitions) {
  for (std::int64_t n : {1, 2, 5}) {
    SCOPED_TRACE("B = " + std::to_string(n));
    auto a = embeddings<double>(n, 4, 1), b = embeddings<double>(n, 4, 2);
    auto t = scalar<double>(1.3), bias = scalar<double>(-0.7);
    for (ContrastiveStrategy st :
         {ContrastiveStrategy::allgather_nograd, ContrastiveStrategy::gather,
          ContrastiveStrategy::allgather, ContrastiveStrategy::ring}) {
      SCOPED_TRACE(std::string(loss::strategy_name(st)));
      const ContrastiveOptions opt{st, 0, true};
      Tape tape;
      const double nt =
          loss::ntxent(tape, a, b, 0.3, MPI_COMM_SELF, opt).value().local().to_vector()[0];
      const double cl =
          loss::clip_loss(tape, a, b, t, MPI_COMM_SELF, opt).value().local().to_vector()[0];
      const double sg =
          loss::siglip_loss(tape, a, b, t, bias, MPI_COMM_SELF, opt).value().local().to_vector()[0];
      EXPECT_NEAR(nt, naive_ntxent(rows_of(a), rows_of(b), 0.3), 1e-13);
      EXPECT_NEAR(cl, naive_clip(rows_of(a), rows_of(b), 1.3), 1e-13);
      EXPECT_NEAR(sg, naive_siglip(rows_of(a), rows_of(b), 1.3, -0.7), 1e-13);
    }
  }
}

TEST(Contrastive, GradientsMatchFiniteDifferences) {
  auto a = embeddings<double>(4, 3, 3), b = embeddings<double>(4, 3, 4);
  auto t = scalar<double>(0.8), bias = scalar<double>(0.4);
  for (ContrastiveStrategy st : {ContrastiveStrategy::allgather, ContrastiveStrategy::ring,
                                 ContrastiveStrategy::allgather_nograd}) {
    SCOPED_TRACE(std::string(loss::strategy_name(st)));
    const ContrastiveOptions opt{st, 0, true};
    test::expect_gradients_match(
        [&](Tape& tape) { return loss::ntxent(tape, a, b, 0.5, MPI_COMM_SELF, opt); }, {a, b});
    test::expect_gradients_match(
        [&](Tape& tape) { return loss::clip_loss(tape, a, b, t, MPI_COMM_SELF, opt); }, {a, b, t});
    test::expect_gradients_match(
        [&](Tape& tape) { return loss::siglip_loss(tape, a, b, t, bias, MPI_COMM_SELF, opt); },
        {a, b, t, bias});
  }
}

TEST(Contrastive, GradientsWithoutNormalisationMatchFiniteDifferences) {
  auto a = embeddings<double>(3, 2, 5), b = embeddings<double>(3, 2, 6);
  auto t = scalar<double>(0.2);
  const ContrastiveOptions opt{ContrastiveStrategy::ring, 0, false};
  test::expect_gradients_match(
      [&](Tape& tape) { return loss::ntxent(tape, a, b, 0.7, MPI_COMM_SELF, opt); }, {a, b});
  test::expect_gradients_match(
      [&](Tape& tape) { return loss::clip_loss(tape, a, b, t, MPI_COMM_SELF, opt); }, {a, b, t});
}

// The ring computes its blocks in tiles (256 query rows by 1024 keys); with B = 1100 every loss has
// several row tiles and, for each head, two key tiles, all of which must agree with the whole
// stored logits of the all-gather strategy.
TEST(Contrastive, RingTilesAgreeWithTheStoredLogits) {
  auto a = embeddings<double>(1100, 3, 11), b = embeddings<double>(1100, 3, 12);
  auto t = scalar<double>(2.0), bias = scalar<double>(-3.0);
  auto run = [&](ContrastiveStrategy st, int which) {
    for (auto* v : {&a, &b, &t, &bias}) v->zero_grad();
    const ContrastiveOptions opt{st, 0, true};
    Tape tape;
    auto l = which == 0   ? loss::ntxent(tape, a, b, 0.2, MPI_COMM_SELF, opt)
             : which == 1 ? loss::clip_loss(tape, a, b, t, MPI_COMM_SELF, opt)
                          : loss::siglip_loss(tape, a, b, t, bias, MPI_COMM_SELF, opt);
    distop::backward(tape, l);
    std::vector<double> out = {l.value().local().to_vector()[0]};
    for (auto* v : {&a, &b, &t, &bias})
      if (v->has_grad())
        for (double g : v->grad().local().to_vector()) out.push_back(g);
    return out;
  };
  for (int which = 0; which < 3; ++which) {
    const auto ring = run(ContrastiveStrategy::ring, which);
    const auto stored = run(ContrastiveStrategy::allgather, which);
    ASSERT_EQ(ring.size(), stored.size());
    for (std::size_t k = 0; k < ring.size(); ++k)
      ASSERT_NEAR(ring[k], stored[k], 1e-12 * std::max(1.0, std::abs(stored[k])))
          << "loss " << which << ", entry " << k;
  }
}

// Unit vectors at scale 100 (CLIP's cap) and temperature 0.01: exp of the logits overflows float,
// the max-shifted log-sum-exp does not, and float agrees with double.
TEST(Contrastive, StableAtScale100InFloat) {
  ASSERT_TRUE(std::isinf(std::exp(100.0f)));  // what a naive softmax would compute
  const std::int64_t n = 40, d = 16;
  auto af = embeddings<float>(n, d, 7), bf = embeddings<float>(n, d, 8);
  auto ad = embeddings<double>(n, d, 7), bd = embeddings<double>(n, d, 8);
  const double ls = std::log(100.0);
  auto tf = scalar<float>(ls), zf = scalar<float>(-10);
  auto td = scalar<double>(ls), zd = scalar<double>(-10);
  for (ContrastiveStrategy st : {ContrastiveStrategy::allgather, ContrastiveStrategy::ring}) {
    const ContrastiveOptions opt{st, 0, true};
    Tape tape;
    std::vector<Var<float>> lf = {loss::clip_loss(tape, af, bf, tf, MPI_COMM_SELF, opt),
                                  loss::ntxent(tape, af, bf, 0.01f, MPI_COMM_SELF, opt),
                                  loss::siglip_loss(tape, af, bf, tf, zf, MPI_COMM_SELF, opt)};
    std::vector<Var<double>> ld = {loss::clip_loss(tape, ad, bd, td, MPI_COMM_SELF, opt),
                                   loss::ntxent(tape, ad, bd, 0.01, MPI_COMM_SELF, opt),
                                   loss::siglip_loss(tape, ad, bd, td, zd, MPI_COMM_SELF, opt)};
    for (std::size_t k = 0; k < lf.size(); ++k) {
      const float vf = lf[k].value().local().to_vector()[0];
      const double vd = ld[k].value().local().to_vector()[0];
      ASSERT_TRUE(std::isfinite(vf)) << "loss " << k;
      EXPECT_NEAR(vf, vd, 1e-4 * std::max(1.0, std::abs(vd))) << "loss " << k;
      EXPECT_GT(vd, 1.0) << "loss " << k;  // large logits, random pairs: a large loss
    }
    distop::backward(tape, lf[0]);
    for (float g : af.grad().local().to_vector()) ASSERT_TRUE(std::isfinite(g));
    tape.clear();
  }
}

// Above log 100 the scale stays 100 and no gradient reaches the log scale (torch.clamp).
TEST(Contrastive, ClipClampsTheScaleAt100) {
  auto a = embeddings<double>(3, 4, 9), b = embeddings<double>(3, 4, 10);
  auto high = scalar<double>(6.0), cap = scalar<double>(std::log(100.0));
  Tape tape;
  auto lh = loss::clip_loss(tape, a, b, high, MPI_COMM_SELF, one_rank());
  auto lc = loss::clip_loss(tape, a, b, cap, MPI_COMM_SELF, one_rank());
  EXPECT_DOUBLE_EQ(lh.value().local().to_vector()[0], lc.value().local().to_vector()[0]);
  distop::backward(tape, lh);
  EXPECT_EQ(high.grad().local().to_vector()[0], 0.0);
  EXPECT_NE(a.grad().local().to_vector()[0], 0.0);
}

TEST(Contrastive, StrategyNames) {
  for (std::string_view name : loss::strategy_names())
    EXPECT_EQ(loss::strategy_name(loss::parse_strategy(name)), name);
  EXPECT_EQ(loss::parse_strategy("allgather-nograd"), ContrastiveStrategy::allgather_nograd);
  try {
    loss::parse_strategy("all-gather");
    FAIL() << "no error";
  } catch (const distop::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'all-gather'"), std::string::npos) << what;
    EXPECT_NE(what.find("allgather-nograd, gather, allgather, ring"), std::string::npos) << what;
  }
}

TEST(Contrastive, BadInputs) {
  auto a = embeddings<double>(3, 4, 1), b = embeddings<double>(2, 4, 2),
       c = embeddings<double>(3, 4, 3);
  auto t = scalar<double>(0.0);
  Tape tape;
  EXPECT_THROW(loss::ntxent(tape, a, b, 0.5, MPI_COMM_SELF), distop::Error);   // 3 rows and 2
  EXPECT_THROW(loss::ntxent(tape, a, c, 0.0, MPI_COMM_SELF), distop::Error);   // temperature 0
  EXPECT_THROW(loss::clip_loss(tape, a, c, a, MPI_COMM_SELF), distop::Error);  // scale of 12
  EXPECT_THROW(loss::clip_loss(tape, a, c, t, MPI_COMM_SELF,
                               ContrastiveOptions{ContrastiveStrategy::gather, 1, true}),
               distop::Error);  // root 1 of 1 rank
  auto e = embeddings<double>(0, 4, 4);
  EXPECT_THROW(loss::ntxent(tape, e, e, 0.5, MPI_COMM_SELF), distop::Error);  // empty batch
}

// The row kernels on a block of logits split into two column tiles, in a given memory space: the
// loss terms (online log-sum-exp across the tiles, or SigLIP's pair terms), the gradient of the
// logits and its two sums.
struct KernelResult {
  double loss = 0;
  std::vector<double> grad;  // [nq, ncols], row-major
  std::array<double, 2> sums = {0, 0};
};

template <class Space>
KernelResult run_kernels(loss::detail::ContrastiveKind kind, const std::vector<double>& logits,
                         std::int64_t nq, std::int64_t ncols, std::int64_t split, std::int64_t n,
                         double w, double bias) {
  namespace d = loss::detail;
  using View = Kokkos::View<double*, Space>;
  d::RowStatViews<Space> st;
  st.reset(nq);
  Kokkos::View<double*, Space> partial("partial", 2 * nq);
  KernelResult out;
  out.grad.assign(nq * ncols, 0.0);
  std::vector<View> tiles;
  std::vector<d::Tile> where;
  for (std::int64_t j0 : {std::int64_t(0), split}) {
    const std::int64_t nj = j0 == 0 ? split : ncols - split;
    View v("tile", nq * nj);
    auto h = Kokkos::create_mirror_view(v);
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t j = 0; j < nj; ++j) h(i * nj + j) = logits[i * ncols + j0 + j];
    Kokkos::deep_copy(v, h);
    d::Tile t;
    t.nq = nq;
    t.nj = nj;
    t.j0 = j0;
    t.n = n;
    t.own = true;
    tiles.push_back(v);
    where.push_back(t);
    if (kind == d::ContrastiveKind::siglip)
      out.loss += d::siglip_tile_loss(t, v);
    else
      d::fold_tile(kind, t, v, st);
  }
  if (kind != d::ContrastiveKind::siglip) out.loss = d::finish_rows(st);
  for (std::size_t k = 0; k < tiles.size(); ++k) {
    const auto s = d::tile_gradient(kind, where[k], tiles[k], st, w, bias, partial);
    out.sums[0] += s[0];
    out.sums[1] += s[1];
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tiles[k]);
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t j = 0; j < where[k].nj; ++j)
        out.grad[i * ncols + where[k].j0 + j] = h(i * where[k].nj + j);
  }
  return out;
}

// The same block written out directly: log-sum-exps without the max shift (the logits are small).
KernelResult reference_kernels(loss::detail::ContrastiveKind kind, const std::vector<double>& l,
                               std::int64_t nq, std::int64_t ncols, std::int64_t n, double w,
                               double bias) {
  using K = loss::detail::ContrastiveKind;
  KernelResult out;
  out.grad.assign(nq * ncols, 0.0);
  for (std::int64_t i = 0; i < nq; ++i) {
    const std::int64_t pos = kind == K::ntxent ? (i + n) % (2 * n) : i;
    const std::int64_t ex = kind == K::ntxent ? i : -1;
    double den = 0;
    for (std::int64_t j = 0; j < ncols; ++j)
      if (j != ex) den += std::exp(l[i * ncols + j]);
    if (kind != K::siglip) out.loss += std::log(den) - l[i * ncols + pos];
    for (std::int64_t j = 0; j < ncols; ++j) {
      const double x = l[i * ncols + j];
      double g;
      if (kind == K::siglip) {
        const double z = j == pos ? 1.0 : -1.0;
        out.loss += std::log(1 + std::exp(-z * x));
        g = -w * z / (1 + std::exp(z * x));
        out.sums[0] += g * (x - bias);
      } else {
        g = j == ex ? 0.0 : w * std::exp(x) / den - (j == pos ? w : 0.0);
        out.sums[0] += g * x;
      }
      out.sums[1] += g;
      out.grad[i * ncols + j] = g;
    }
  }
  return out;
}

// The portable row kernels in the default space and (host builds) in a second memory space, on
// blocks of two column tiles with the positive and the excluded key in either tile, against the
// block written out directly.
TEST(Contrastive, RowKernelsInEveryMemorySpace) {
  using K = loss::detail::ContrastiveKind;
  for (K kind : {K::ntxent, K::clip, K::siglip}) {
    const std::int64_t n = 3, nq = kind == K::ntxent ? 2 * n : n, ncols = nq, split = nq - 2;
    std::vector<double> l(nq * ncols);
    for (std::size_t e = 0; e < l.size(); ++e) l[e] = std::sin(1.7 * double(e) + 0.3) * 3.0;
    const double w = 0.37, bias = kind == K::siglip ? -1.5 : 0.0;
    const KernelResult ref = reference_kernels(kind, l, nq, ncols, n, w, bias);
    std::vector<KernelResult> got = {
        run_kernels<distop::MemSpace>(kind, l, nq, ncols, split, n, w, bias)};
#if DISTOP_CONTRASTIVE_SECOND_SPACE
    got.push_back(run_kernels<SecondSpace>(kind, l, nq, ncols, split, n, w, bias));
#endif
    for (const KernelResult& r : got) {
      SCOPED_TRACE("kind " + std::to_string(static_cast<int>(kind)));
      EXPECT_NEAR(r.loss, ref.loss, 1e-12 * std::abs(ref.loss));
      for (std::size_t e = 0; e < ref.grad.size(); ++e)
        EXPECT_NEAR(r.grad[e], ref.grad[e], 1e-14) << "entry " << e;
      EXPECT_NEAR(r.sums[0], ref.sums[0], 1e-13);
      EXPECT_NEAR(r.sums[1], ref.sums[1], 1e-13);
      // The same kernels in either space give the same bits.
      EXPECT_EQ(r.loss, got[0].loss);
      EXPECT_EQ(r.grad, got[0].grad);
    }
  }
}

}  // namespace
