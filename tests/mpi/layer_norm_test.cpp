// LayerNorm with the normalised (last) axis split across ranks: balanced and uneven (the large
// block last or first), alone or with the rows split over a second grid axis. Values and gradients
// equal the one-rank layer's to rounding, gradients match finite differences, and a split that
// does not fit the layer is an Error on every rank.
#include "distop/nn/layer_norm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "gradcheck.hpp"
#include "mpi_gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::world_size;

namespace {

constexpr std::int64_t kRows = 5;
constexpr std::int64_t kDim = 7;

struct Layout {
  std::string name;
  Partition partition;                // grid [row parts, column parts]
  std::vector<std::int64_t> columns;  // the blocks of the normalised axis
  std::vector<std::int64_t> rows;     // the blocks of the rows
};

std::vector<std::int64_t> balanced(std::int64_t n, int parts) {
  const auto b = balanced_bounds(n, parts);
  std::vector<std::int64_t> e;
  for (int i = 0; i < parts; ++i) e.push_back(b[i + 1] - b[i]);
  return e;
}

std::vector<Layout> layouts() {
  const int n = world_size();
  const Partition line = Partition::world(Shape{1, n});
  std::vector<Layout> out;
  out.push_back({"balanced", line, balanced(kDim, n), {kRows}});
  if (n >= 2) {
    std::vector<std::int64_t> uneven(static_cast<std::size_t>(n), 1);
    uneven.back() = kDim - (n - 1);
    out.push_back({"uneven", line, uneven, {kRows}});
    // The other way round: the first block large, the others one column each (a Decomposition
    // has no empty blocks).
    std::vector<std::int64_t> large_first(static_cast<std::size_t>(n), 1);
    large_first.front() = kDim - (n - 1);
    out.push_back({"large first block", line, large_first, {kRows}});
  }
  if (n == 4)
    out.push_back({"rows and columns split", Partition::world(Shape{2, 2}), {3, 4}, {2, 3}});
  return out;
}

TensorSpace x_space(const Layout& l) {
  return TensorSpace(l.partition, Decomposition::blocks(Shape{kRows, kDim}, l.partition.shape(),
                                                        {l.rows, l.columns}, {0, 1}));
}

nn::LayerNorm<double> make_layer(const Layout& l) {
  nn::LayerNorm<double> norm(kDim, l.partition,
                             {.eps = 1e-4, .split_axis = 1, .split_extents = l.columns});
  // Values by global index: the same at every partitioning.
  norm.weight().value().local().copy_from(
      random_tensor<double>(norm.parameter_space(), 2, 0.5, 1.5).local());
  norm.bias().value().local().copy_from(random_tensor<double>(norm.parameter_space(), 3).local());
  return norm;
}

// A parameter's copies' gradients added up into the global [D] vector.
std::vector<double> summed_gradient(const Var<double>& p) {
  std::vector<double> g(static_cast<std::size_t>(kDim), 0.0);
  if (p.has_grad() && p.space().local_shape().numel() > 0) {
    const auto v = p.grad().local().to_vector();
    const auto off = static_cast<std::size_t>(p.space().local_offset()[0]);
    for (std::size_t j = 0; j < v.size(); ++j) g[off + j] = v[j];
  }
  MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  return g;
}

}  // namespace

TEST(LayerNormSplit, ValuesAndGradientsEqualOneRank) {
  // The one-rank reference: the whole tensor on every process.
  const TensorSpace whole = local_space(Shape{kRows, kDim});
  nn::LayerNorm<double> ref(kDim, {.eps = 1e-4});
  ref.weight().value().local().copy_from(
      random_tensor<double>(ref.parameter_space(), 2, 0.5, 1.5).local());
  ref.bias().value().local().copy_from(random_tensor<double>(ref.parameter_space(), 3).local());
  Var<double> x1(random_tensor<double>(whole, 1, -2, 2), true);
  Tape t1;
  Var<double> y1 = ref.forward(t1, x1);
  auto l1 = test::weighted_sum(t1, y1, random_tensor<double>(whole, 4));
  backward(t1, l1);
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    const TensorSpace xs = x_space(l);
    nn::LayerNorm<double> norm = make_layer(l);
    Var<double> x(random_tensor<double>(xs, 1, -2, 2), true);
    Tape tape;
    Var<double> y = norm.forward(tape, x);
    ASSERT_TRUE(y.space() == xs);
    test::expect_box_near(y.value(), y1.value().local().to_vector(), 1e-13, "y");
    auto loss = test::weighted_sum(tape, y, random_tensor<double>(xs, 4));
    backward(tape, loss);
    test::expect_box_near(x.grad(), x1.grad().local().to_vector(), 1e-12, "dx");
    // The copies along the rows' grid axis add up to the one-rank gradient.
    const auto dw = summed_gradient(norm.weight());
    const auto db = summed_gradient(norm.bias());
    const auto dw1 = ref.weight().grad().local().to_vector();
    const auto db1 = ref.bias().grad().local().to_vector();
    for (std::size_t j = 0; j < dw.size(); ++j) {
      EXPECT_NEAR(dw[j], dw1[j], 1e-12) << "dweight " << j;
      EXPECT_NEAR(db[j], db1[j], 1e-12) << "dbias " << j;
    }
  }
}

TEST(LayerNormSplit, GradientsMatchFiniteDifferences) {
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    nn::LayerNorm<double> norm = make_layer(l);
    Var<double> x(random_tensor<double>(x_space(l), 1, -2, 2), true);
    const auto r = random_tensor<double>(x.space(), 4);
    test::expect_gradients_match_everywhere(
        [&](Tape& t) { return test::weighted_sum(t, norm.forward(t, x), r); },
        {x, norm.weight(), norm.bias()}, 1e-6, 1e-6);
  }
}

TEST(LayerNormSplit, AMismatchedSplitIsAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const Partition line = Partition::world(Shape{1, n});
  std::vector<std::int64_t> uneven(static_cast<std::size_t>(n), 1);
  uneven.back() = kDim - (n - 1);
  nn::LayerNorm<double> norm(kDim, line, {.split_axis = 1, .split_extents = uneven});
  Tape tape;
  // Balanced where the layer is uneven: every rank throws (none hangs in the statistics).
  Var<double> x(random_tensor<double>(x_space({"", line, balanced(kDim, n), {kRows}}), 1), true);
  if (balanced(kDim, n) != uneven) {
    EXPECT_NE(test::error_of([&] { norm.forward(tape, x); }).find("must be split as the layer's"),
              std::string::npos);
  }
  // An empty block: refused by the layer's own check, on every rank.
  std::vector<std::int64_t> with_empty(static_cast<std::size_t>(n), 1);
  with_empty.front() = 0;
  with_empty.back() = kDim - (n - 2);
  EXPECT_NE(test::error_of([&] {
              nn::LayerNorm<double>(kDim, line, {.split_axis = 1, .split_extents = with_empty});
            }).find("positive extents"),
            std::string::npos);
  // A local layer given a split normalised axis.
  nn::LayerNorm<double> local(kDim);
  EXPECT_NE(test::error_of([&] { local.forward(tape, x); }).find("split_axis"), std::string::npos);
  // The input on another partition.
  Var<double> other(random_tensor<double>(local_space(Shape{kRows, kDim}), 1), true);
  EXPECT_NE(test::error_of([&] { norm.forward(tape, other); }).find("expected the layer's"),
            std::string::npos);
  // Extents that do not add up.
  EXPECT_THROW(nn::LayerNorm<double>(
                   kDim, line,
                   {.split_axis = 1,
                    .split_extents = std::vector<std::int64_t>(static_cast<std::size_t>(n), 1)}),
               Error);
}
