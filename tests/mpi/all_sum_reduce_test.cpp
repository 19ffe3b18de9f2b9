#include "distop/ops/all_sum_reduce.hpp"

#include <gtest/gtest.h>

#include "box_util.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

// A [B, F] tensor on a grid whose first axis replicates it (axis map {-1, 1}): features split by
// grid axis 1, copies along grid axis 0.
TensorSpace replicated_space(const Shape& grid, std::vector<int> ranks = {}) {
  Shape global{3, 8};
  return TensorSpace(Partition::world(grid, std::move(ranks)),
                     Decomposition::balanced(global, grid, {-1, 1}));
}

template <class T>
void adjoint_matrix() {
  const int n = world_size();
  // (space, summed grid axes): 1-D to 4-D tensors, idle ranks, sums over one or two axes.
  std::vector<std::pair<TensorSpace, std::vector<int>>> cases{
      {replicated_space(Shape{n, 1}), {0}},
      {TensorSpace(Partition::world(Shape{n}), Decomposition::balanced(Shape{5}, Shape{n}, {-1})), {0}},
      {TensorSpace(Partition::world(Shape{1, n, 1}),
                   Decomposition::balanced(Shape{2, 3, 4}, Shape{1, n, 1}, {0, -1, 2})),
       {1}}};
  if (n >= 2) cases.push_back({replicated_space(Shape{2, 1}, {n - 1, 0}), {0}});  // idle at n > 2
  if (n >= 4) {
    cases.push_back({replicated_space(Shape{2, 2}), {0}});
    const Shape g{2, 1, 2, 1};
    cases.push_back({TensorSpace(Partition::world(g), Decomposition::balanced(Shape{2, 3, 2, 2}, g,
                                                                             {-1, 1, -1, 3})),
                     {0, 2}});
  }
  for (const auto& [s, axes] : cases) {
    AllSumReduce<T> a(s, axes);
    auto r = distop::testing::adjoint_test(a);
    EXPECT_TRUE(r.passed) << s.str() << ": " << r.str();
  }
  auto spaces = std::vector<TensorSpace>{cases.front().first};
  // Summing over no axes is the identity, also self-adjoint.
  AllSumReduce<T> id(spaces.front(), {});
  EXPECT_TRUE(distop::testing::adjoint_test(id).passed);
}

}  // namespace

TEST(AllSumReduceAdjoint, Double) { adjoint_matrix<double>(); }
TEST(AllSumReduceAdjoint, Float) { adjoint_matrix<float>(); }

TEST(AllSumReduce, EveryCopyHoldsTheSum) {
  const int n = world_size();
  auto s = replicated_space(Shape{n, 1});
  AllSumReduce<double> a(s, {0});
  DistTensor<double> x(s);
  test::fill_global_index(x);
  auto y = a.apply(x);
  EXPECT_TRUE(test::holds_global_index(y, n));
}

TEST(AllSumReduce, SummingOverASplitAxisIsAnError) {
  const int n = world_size();
  TensorSpace split(Shape{2 * n}, Partition::world(Shape{n}));
  EXPECT_THROW(AllSumReduce<float>(split, {0}), Error);
  EXPECT_THROW(AllSumReduce<float>(split, {3}), Error);
}

namespace {
// An operator whose adjoint is wrong by a factor: the adjoint test must catch it.
class WrongAdjoint final : public LinearOperator<double> {
 public:
  explicit WrongAdjoint(TensorSpace s) : s_(std::move(s)) {}
  const TensorSpace& domain() const override { return s_; }
  const TensorSpace& range() const override { return s_; }
  void forward(const DistTensor<double>& x, DistTensor<double>& y) const override {
    y.local().copy_from(x.local());
  }
  void adjoint(const DistTensor<double>& y, DistTensor<double>& x) const override {
    x.local().copy_from(y.local());
    if (x.local_numel() > 0) {
      auto v = x.local().to_vector();
      v[0] *= 1.5;
      x.local().copy_from(Tensor<double>::from_vector(x.local().shape(), v));
    }
  }
  std::string name() const override { return "WrongAdjoint"; }

 private:
  TensorSpace s_;
};
}  // namespace

TEST(AdjointTest, CatchesAWrongAdjoint) {
  WrongAdjoint w(TensorSpace(Shape{4 * world_size()}, Partition::world(Shape{world_size()})));
  auto r = distop::testing::adjoint_test(w);
  EXPECT_FALSE(r.passed) << r.str();
  EXPECT_GT(r.relative_error, 1e-6);
}

TEST(AllSumReduce, CommunicationAccountingMatchesTheClosedForm) {
  const int n = world_size();
  auto s = replicated_space(Shape{n, 1});  // boxes of 3 x 8 doubles = 192 bytes
  AllSumReduce<double> a(s, {0});
  const std::int64_t g = n;
  const CommStats expected =
      n == 1 ? CommStats{} : CommStats{2 * (g - 1), 2 * (g - 1) * 192 / g, 2 * (g - 1), 2 * (g - 1) * 192 / g};
  EXPECT_EQ(a.forward_stats(), expected);
  EXPECT_EQ(a.adjoint_stats(), expected);
}
