// Dot-product adjoint tests of the operators that the sharded contrastive losses move rows with
// (src/loss/contrastive.cpp), on the very spaces the strategies build: balanced, unbalanced and
// empty blocks, a gather root without rows, the ring's links.
#include "../../src/loss/contrastive_movers.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::loss::ContrastiveStrategy;
using distop::test::world_size;

namespace {

// Row layouts for world_size() ranks: balanced, unbalanced, and (from 2 ranks) one rank and the
// last rank without rows.
std::vector<std::vector<std::int64_t>> layouts() {
  const int n = world_size();
  std::vector<std::vector<std::int64_t>> out;
  std::vector<std::int64_t> balanced(n, 3), unbalanced(n), first_empty(n, 2), last_empty(n, 1);
  for (int c = 0; c < n; ++c) unbalanced[c] = c + 1;
  out.push_back(balanced);
  out.push_back(unbalanced);
  if (n > 1) {
    first_empty[0] = 0;
    last_empty[n - 1] = 0;
    out.push_back(first_empty);
    out.push_back(last_empty);
  }
  return out;
}

std::string describe(const std::vector<std::int64_t>& rows) {
  std::string s;
  for (std::int64_t r : rows) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return "rows " + s;
}

template <class T>
void expect_adjoint(const LinearOperator<T>& op) {
  const distop::testing::AdjointReport report = distop::testing::adjoint_test(op);
  EXPECT_TRUE(report.passed) << op.name() << ": " << report.str();
}

template <class T>
void every_mover() {
  constexpr std::int64_t kDim = 5;
  const int n = world_size();
  for (const auto& rows : layouts()) {
    SCOPED_TRACE(describe(rows));
    for (ContrastiveStrategy s :
         {ContrastiveStrategy::allgather_nograd, ContrastiveStrategy::gather,
          ContrastiveStrategy::allgather, ContrastiveStrategy::ring}) {
      SCOPED_TRACE(std::string(loss::strategy_name(s)));
      // The gather's root: the last rank, which holds no rows in the last layout.
      const auto mv =
          loss::detail::make_contrastive_movers<T>(MPI_COMM_WORLD, rows, kDim, s, n - 1);
      if (s == ContrastiveStrategy::ring) {
        ASSERT_EQ(mv->links.size(), n > 1 ? static_cast<std::size_t>(n) : 0u);
        for (const auto& link : mv->links) expect_adjoint(*link);
        continue;
      }
      ASSERT_TRUE(mv->gather);
      expect_adjoint(*mv->gather);
    }
  }
}

// Double only: the data movement is the same in float, which contrastive_test runs end to end.
TEST(ContrastiveMoversAdjoint, EveryStrategysOperators) { every_mover<double>(); }

}  // namespace
