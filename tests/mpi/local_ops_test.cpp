// The local operations of nn/ (arithmetic, pointwise, reduction, transpose, concat, normalize,
// matmul, softmax) on tensors whose batch axis is split over the ranks (balanced, unbalanced, with
// an idle rank): values and gradients equal the one-rank computation on the whole tensor, and
// inputs that break an operation's contract (a reduction over a split axis, say) are an Error on
// every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/concat.hpp"
#include "distop/nn/log_softmax.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/normalize.hpp"
#include "distop/nn/pointwise.hpp"
#include "distop/nn/reduction.hpp"
#include "distop/nn/softmax.hpp"
#include "distop/nn/transpose.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::sum_over_ranks;
using distop::test::world_size;

namespace {

constexpr std::int64_t kBatch = 7;

// How the batch axis is laid out over the ranks.
struct Layout {
  std::string name;
  Partition partition;                    // a 1-D grid
  std::vector<std::int64_t> batch_parts;  // the batch blocks along it
};

std::vector<Layout> layouts() {
  const int n = world_size();
  std::vector<Layout> out;
  out.push_back({"balanced", Partition::world(Shape{n}),
                 std::vector<std::int64_t>(balanced_bounds(kBatch, n).size() - 1)});
  const auto b = balanced_bounds(kBatch, n);
  for (int i = 0; i < n; ++i) out.back().batch_parts[static_cast<std::size_t>(i)] = b[i + 1] - b[i];
  if (n >= 2) {  // one row on every rank but the last, which holds the rest
    std::vector<std::int64_t> parts(static_cast<std::size_t>(n), 1);
    parts.back() = kBatch - (n - 1);
    out.push_back({"unbalanced", Partition::world(Shape{n}), parts});
  }
  if (n >= 3) {  // rank 0 holds nothing
    std::vector<int> ranks;
    for (int r = 1; r < n; ++r) ranks.push_back(r);
    const auto bi = balanced_bounds(kBatch, n - 1);
    std::vector<std::int64_t> parts;
    for (int i = 0; i + 1 < n; ++i) parts.push_back(bi[i + 1] - bi[i]);
    out.push_back({"idle rank 0", Partition::world(Shape{n - 1}, ranks), parts});
  }
  return out;
}

// [kBatch, ...] with the batch axis split as the layout says, the other axes whole.
TensorSpace batch_space(const Layout& l, const Shape& shape) {
  std::vector<std::vector<std::int64_t>> extents{l.batch_parts};
  std::vector<int> map{0};
  for (int a = 1; a < shape.rank(); ++a) {
    extents.push_back({shape[a]});
    map.push_back(-1);
  }
  return TensorSpace(l.partition, Decomposition::blocks(shape, l.partition.shape(), extents, map));
}

// `shape` replicated over the layout's ranks (a parameter).
TensorSpace replicated_space(const Layout& l, const Shape& shape) {
  return TensorSpace(l.partition,
                     Decomposition::balanced(shape, l.partition.shape(),
                                             std::vector<int>(shape.extents().size(), -1)));
}

using Op = std::function<Var<double>(Tape&, const Var<double>& x, const Var<double>& p)>;

struct Case {
  const char* name;
  Op op;
  Shape x_shape;           // the batch axis first, kBatch long
  Shape p_shape;           // a replicated parameter the operation may use
  double lo = -1, hi = 1;  // x's entries
};

struct Run {
  Var<double> x, p, y;
};

// y = op(x, p) and the gradients of L = <y, r>, for x and r drawn by global index (the same
// entries in any space) and p replicated.
Run run(const Case& c, const TensorSpace& xs, const TensorSpace& ps) {
  Var<double> x(random_tensor<double>(xs, 1, c.lo, c.hi), true);
  Var<double> p(random_tensor<double>(ps, 2, 0.5, 1.5), true);
  Tape tape;
  Var<double> y = c.op(tape, x, p);
  const auto r = random_tensor<double>(y.space(), 3);
  auto l = distop::test::weighted_sum(tape, y, r);
  backward(tape, l);
  return {x, p, y};
}

void expect_near_rel(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << what;
}

// Every entry of this rank's box of `got` against the global tensor `want`.
void expect_box(const DistTensor<double>& got, const std::vector<double>& want,
                const std::string& what) {
  distop::test::expect_box_near(got, want, 1e-12, what);
}

void expect_equals_one_rank(const Case& c) {
  SCOPED_TRACE(c.name);
  const Run ref = run(c, local_space(c.x_shape), local_space(c.p_shape));
  const auto y_ref = ref.y.value().local().to_vector();
  const auto dx_ref = ref.x.grad().local().to_vector();
  const bool scalar_out = ref.y.space().global_shape() == Shape{1};
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    const Run d = run(c, batch_space(l, c.x_shape), replicated_space(l, c.p_shape));
    if (scalar_out) {  // each rank's component is its share
      expect_near_rel(sum_over_ranks(d.y.value(), 1)[0], y_ref[0], "y (sum of the components)");
    } else {
      expect_box(d.y.value(), y_ref, "y");
    }
    ASSERT_TRUE(d.x.has_grad());
    expect_box(d.x.grad(), dx_ref, "dx");
    // The copies of a replicated parameter each get their partial gradient; they add up to the
    // whole batch's.
    if (ref.p.has_grad()) {
      const auto dp_ref = ref.p.grad().local().to_vector();
      const auto dp = sum_over_ranks(d.p.grad(), dp_ref.size());
      for (std::size_t i = 0; i < dp.size(); ++i)
        expect_near_rel(dp[i], dp_ref[i], "dp (summed over the ranks) entry " + std::to_string(i));
    }
  }
}

const Shape kRows{kBatch, 5};
const Shape kRows3{kBatch, 3, 4};
const Shape kNone{1};

}  // namespace

TEST(LocalOps, ArithmeticEqualsOneRank) {
  const std::vector<Case> cases{
      {"mul same space",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         return nn::mul(t, x, nn::exp(t, x));
       },
       kRows, kNone},
      {"add and sub same space",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         return nn::sub(t, nn::add(t, x, nn::scale(t, x, 3.0)), nn::exp(t, x));
       },
       kRows, kNone},
      {"add broadcast [F]",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::add(t, x, p); }, kRows,
       Shape{5}},
      {"sub broadcast [1, F]",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::sub(t, x, p); }, kRows,
       Shape{1, 5}},
      {"mul broadcast [C, L]",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::mul(t, x, p); }, kRows3,
       Shape{3, 4}},
      {"scale by a scalar Var",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::scale(t, x, p); },
       kRows, kNone},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, PointwiseEqualsOneRank) {
  const std::vector<Case> cases{
      {"exp", [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::exp(t, x); },
       kRows, kNone},
      {"log", [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::log(t, x); },
       kRows, kNone, 0.5, 2.0},
      {"sqrt", [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::sqrt(t, x); },
       kRows3, kNone, 0.5, 2.0},
      {"clamp",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::clamp(t, x, -0.3, 0.4); },
       kRows, kNone},
      {"logsigmoid",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::logsigmoid(t, x); },
       kRows, kNone, -5.0, 5.0},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, ReductionsEqualOneRank) {
  const std::vector<Case> cases{
      {"sum over the features, keepdim",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::sum(t, x, {1}, true); },
       kRows, kNone},
      {"mean over two axes",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         return nn::mean(t, x, {-1, 1});
       },
       kRows3, kNone},
      {"sum of everything",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::sum(t, x); }, kRows3,
       kNone},
      {"mean of everything (of a product with a replicated parameter)",
       [](Tape& t, const Var<double>& x, const Var<double>& p) {
         return nn::mean(t, nn::mul(t, x, p));
       },
       kRows, Shape{5}},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, RowOperationsEqualOneRank) {
  const std::vector<Case> cases{
      {"softmax",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::softmax(t, x); }, kRows3,
       kNone, -3.0, 3.0},
      {"log_softmax",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::log_softmax(t, x); },
       kRows, kNone, -3.0, 3.0},
      {"normalize",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::normalize(t, x); },
       kRows3, kNone},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, LayoutOperationsEqualOneRank) {
  const std::vector<Case> cases{
      {"transpose (the batch becomes the split columns)",
       [](Tape& t, const Var<double>& x, const Var<double>&) { return nn::transpose(t, x); }, kRows,
       kNone},
      {"concat along the features",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         return nn::concat(t, {x, nn::exp(t, x), x}, 1);
       },
       kRows, kNone},
      {"chunk into uneven pieces, one unused",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         auto parts = nn::chunk(t, x, 3, -1);  // 5 features: 2, 2, 1
         return nn::mul(t, parts[0], parts[1]);
       },
       kRows, kNone},
      {"split along the middle axis",
       [](Tape& t, const Var<double>& x, const Var<double>&) {
         auto parts = nn::split(t, x, {1, 2}, 1);
         return nn::add(t, nn::sum(t, parts[1], {1}, true), parts[0]);
       },
       kRows3, kNone},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, MatmulEqualsOneRank) {
  const std::vector<Case> cases{
      {"x W (W replicated)",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::matmul(t, x, p); },
       kRows, Shape{5, 3}},
      {"x W^T",
       [](Tape& t, const Var<double>& x, const Var<double>& p) { return nn::matmul_nt(t, x, p); },
       kRows, Shape{3, 5}},
      {"(x^T)^T W",
       [](Tape& t, const Var<double>& x, const Var<double>& p) {
         return nn::matmul_tn(t, nn::transpose(t, x), p);
       },
       kRows, Shape{5, 2}},
  };
  for (const auto& c : cases) expect_equals_one_rank(c);
}

TEST(LocalOps, BrokenContractsAreErrorsOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const Layout l = layouts().front();
  Tape tape;
  Var<double> x(random_tensor<double>(batch_space(l, kRows), 1), true);
  // The features split instead of the batch.
  Var<double> xf(DistTensor<double>(TensorSpace(
                     l.partition, Decomposition::balanced(Shape{kBatch, world_size()},
                                                          l.partition.shape(), {-1, 0}))),
                 true);
  EXPECT_THROW(nn::sum(tape, x, {0}), Error);
  EXPECT_THROW(nn::mean(tape, x, {0, 1}, true), Error);
  EXPECT_THROW(nn::softmax(tape, xf), Error);
  EXPECT_THROW(nn::log_softmax(tape, xf), Error);
  EXPECT_THROW(nn::normalize(tape, xf), Error);
  EXPECT_THROW(nn::sum(tape, xf, {-1}), Error);
  EXPECT_THROW(nn::concat(tape, {x, x}, 0), Error);
  EXPECT_THROW(nn::split(tape, x, {3, 4}, 0), Error);
  EXPECT_THROW(nn::chunk(tape, x, 2, 0), Error);
  // A contraction over the split batch, and a row operand split where the rows are not.
  EXPECT_THROW(nn::matmul_tn(tape, x, x), Error);
  Var<double> b_split(DistTensor<double>(
      TensorSpace(l.partition, Decomposition::balanced(Shape{5}, l.partition.shape(), {0}))));
  EXPECT_THROW(nn::add(tape, x, b_split), Error);
  // The same shape in another layout, and a factor on other ranks.
  std::vector<std::int64_t> other{kBatch - (world_size() - 1)};  // most rows on the first rank
  other.resize(l.batch_parts.size(), 1);
  if (other != l.batch_parts) {
    Var<double> moved(random_tensor<double>(batch_space({"other", l.partition, other}, kRows), 2));
    EXPECT_THROW(nn::mul(tape, x, moved), Error);
  }
  // A factor held by rank 0 alone, where every rank holds rows of x.
  const Partition first = Partition::world(Shape{1}, {0});
  EXPECT_THROW(nn::scale(tape, x,
                         Var<double>(DistTensor<double>(TensorSpace(
                             first, Decomposition::balanced(Shape{1}, first.shape(), {-1}))))),
               Error);
  EXPECT_EQ(tape.size(), 0u);
}
