// SendRecv: dot-product adjoint tests over a matrix of shapes and rank pairs, the sequential
// definition (the destination holds exactly the source's tensor), accounting and bad input.
#include "distop/ops/send_recv.hpp"

#include <gtest/gtest.h>

#include <string>

#include "box_util.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

struct Case {
  const char* name;
  int ranks_needed;
  Shape shape;
  int src;
  int dst;
};

std::vector<Case> cases() {
  return {
      {"1d_same_rank", 1, {7}, 0, 0},
      {"1d_0_to_1", 2, {7}, 0, 1},
      {"2d_1_to_0", 2, {3, 5}, 1, 0},
      {"3d_idle_rank", 3, {2, 3, 4}, 2, 0},
      {"4d_same_rank_idle_ranks", 3, {2, 2, 2, 2}, 2, 2},
      {"2d_0_to_3_two_idle", 4, {5, 2}, 0, 3},
      {"4d_3_to_1", 4, {2, 3, 2, 3}, 3, 1},
  };
}

template <class T>
void run_adjoint_matrix() {
  int ran = 0;
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    SendRecv<T> op(MPI_COMM_WORLD, c.shape, c.src, c.dst);
    auto r = distop::testing::adjoint_test(op);
    EXPECT_TRUE(r.passed) << c.name << ": " << r.str();
    ++ran;
  }
  // The partition form, with a 2-D grid mirrored on the destination: last rank to first.
  const int n = world_size();
  TensorSpace src(Shape{4, 6}, Partition::world(Shape{1, 1}, {n - 1}));
  SendRecv<T> op(src, Partition::world(Shape{1, 1}, {0}));
  EXPECT_EQ(op.range(), TensorSpace(Shape{4, 6}, Partition::world(Shape{1, 1}, {0})));
  auto r = distop::testing::adjoint_test(op);
  EXPECT_TRUE(r.passed) << "partition form: " << r.str();
  EXPECT_GE(ran + 1, 2);
}

}  // namespace

TEST(SendRecvAdjoint, MatrixDouble) { run_adjoint_matrix<double>(); }
TEST(SendRecvAdjoint, MatrixFloat) { run_adjoint_matrix<float>(); }

TEST(SendRecv, DestinationHoldsExactlyTheSourceTensorAndAdjointSendsItBack) {
  for (const auto& c : cases()) {
    if (world_size() < c.ranks_needed) continue;
    SCOPED_TRACE(c.name);
    SendRecv<double> op(MPI_COMM_WORLD, c.shape, c.src, c.dst);
    DistTensor<double> x(op.domain());
    test::fill_global_index(x, 0.5);
    auto y = op.apply(x);
    const auto got = y.local().to_vector();
    if (world_rank() == c.dst) {
      ASSERT_EQ(static_cast<std::int64_t>(got.size()), c.shape.numel());
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 0.5 * static_cast<double>(i));
    } else {
      EXPECT_TRUE(got.empty());
    }
    // The adjoint moves dst's tensor back to src, overwriting what was there.
    DistTensor<double> dy(op.range());
    test::fill_global_index(dy, -2.0);
    DistTensor<double> dx(op.domain());
    dx.local().fill(7.0);
    op.adjoint(dy, dx);
    const auto back = dx.local().to_vector();
    if (world_rank() == c.src) {
      ASSERT_EQ(static_cast<std::int64_t>(back.size()), c.shape.numel());
      for (std::size_t i = 0; i < back.size(); ++i)
        ASSERT_EQ(back[i], -2.0 * static_cast<double>(i));
    } else {
      EXPECT_TRUE(back.empty());
    }
  }
}

TEST(SendRecv, CommunicationAccountingMatchesTheClosedForm) {
  const int n = world_size();
  // 3 x 4 doubles = 96 bytes from rank 0 to the last rank.
  SendRecv<double> op(MPI_COMM_WORLD, Shape{3, 4}, 0, n - 1);
  const CommStats sent{1, 96, 0, 0};
  const CommStats received{0, 0, 1, 96};
  const int r = world_rank();
  if (n == 1) {
    EXPECT_EQ(op.forward_stats(), CommStats{});
    EXPECT_EQ(op.adjoint_stats(), CommStats{});
  } else if (r == 0) {
    EXPECT_EQ(op.forward_stats(), sent);
    EXPECT_EQ(op.adjoint_stats(), received);
  } else if (r == n - 1) {
    EXPECT_EQ(op.forward_stats(), received);
    EXPECT_EQ(op.adjoint_stats(), sent);
  } else {
    EXPECT_EQ(op.forward_stats(), CommStats{});
    EXPECT_EQ(op.adjoint_stats(), CommStats{});
  }
  // A copy on one rank moves nothing; floats count 4 bytes each.
  SendRecv<float> local(MPI_COMM_WORLD, Shape{5}, n - 1, n - 1);
  EXPECT_EQ(local.forward_stats(), CommStats{});
  EXPECT_EQ(local.adjoint_stats(), CommStats{});
  if (n > 1) {
    SendRecv<float> f(MPI_COMM_WORLD, Shape{5}, 1, 0);
    if (r == 1) {
      EXPECT_EQ(f.forward_stats(), (CommStats{1, 20, 0, 0}));
    }
    if (r == 0) {
      EXPECT_EQ(f.forward_stats(), (CommStats{0, 0, 1, 20}));
    }
  }
}

namespace {

// Runs `make` on every rank and expects the same SendRecv Error everywhere, containing `needle`;
// then checks that the ranks are still in step by moving a tensor.
template <class Make>
void expect_error_everywhere(Make make, const std::string& needle) {
  std::string message;
  try {
    make();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "SendRecv");
    message = e.detail();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
  // Every rank raised the same message (the others name the rank it came from): compare lengths
  // and a checksum over the world.
  if (message.rfind("on rank ", 0) == 0) message = message.substr(message.find(": ") + 2);
  unsigned long long mine[2] = {message.size(), 0};  // unsigned: the hash wraps, well defined
  for (char ch : message) mine[1] = mine[1] * 31 + static_cast<unsigned char>(ch);
  unsigned long long lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo[0], hi[0]);
  EXPECT_EQ(lo[1], hi[1]) << "ranks raised different messages; this one: " << message;
  // Not out of step: a transfer still works.
  const int n = world_size();
  SendRecv<double> ok(MPI_COMM_WORLD, Shape{2}, 0, n - 1);
  DistTensor<double> x(ok.domain());
  x.local().fill(3.0);
  auto y = ok.apply(x);
  if (world_rank() == n - 1) {
    EXPECT_EQ(y.local().to_vector(), (std::vector<double>{3.0, 3.0}));
  }
}

}  // namespace

TEST(SendRecv, MismatchedShapesAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const std::int64_t cols = world_rank() == n - 1 ? 6 : 5;
  expect_error_everywhere(
      [&] {
        SendRecv<double>(MPI_COMM_WORLD, Shape{4, cols}, 0, n - 1);
      },
      "mismatched Send/Recv shapes");
  // The same through the partition form: the tensor spaces differ between ranks.
  expect_error_everywhere(
      [&] {
        TensorSpace src(Shape{4, cols}, Partition::world(Shape{1, 1}, {0}));
        SendRecv<double>(src, Partition::world(Shape{1, 1}, {n - 1}));
      },
      "mismatched Send/Recv shapes");
}

TEST(SendRecv, MismatchedRanksOrTypesAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  // The last rank thinks the message goes the other way.
  const bool last = world_rank() == n - 1;
  expect_error_everywhere(
      [&] { SendRecv<double>(MPI_COMM_WORLD, Shape{3}, last ? 1 : 0, last ? 0 : 1); },
      "mismatched Send/Recv shapes");
  // Rank 0 moves floats, the others doubles.
  expect_error_everywhere(
      [&] {
        if (world_rank() == 0) {
          SendRecv<float>(MPI_COMM_WORLD, Shape{3}, 0, 1);
        } else {
          SendRecv<double>(MPI_COMM_WORLD, Shape{3}, 0, 1);
        }
      },
      "mismatched Send/Recv shapes");
}

TEST(SendRecv, RanksOutOfRangeAreAnErrorOnEveryRank) {
  const int n = world_size();
  expect_error_everywhere([&] { SendRecv<float>(MPI_COMM_WORLD, Shape{3}, 0, n); }, "out of range");
  expect_error_everywhere([&] { SendRecv<float>(MPI_COMM_WORLD, Shape{3}, -1, 0); },
                          "out of range");
  expect_error_everywhere(
      [&] {
        SendRecv<float>(MPI_COMM_WORLD, Shape{3, 0}, 0, 0);
      },
      "extents of at least 1");
}

TEST(SendRecv, PartitionsOfMoreThanOneRankAreAnError) {
  DISTOP_REQUIRE_RANKS(2);
  expect_error_everywhere(
      [&] {
        TensorSpace src(Shape{4}, Partition::world(Shape{2}, {0, 1}));
        SendRecv<double>(src, Partition::world(Shape{1}, {0}));
      },
      "one rank");
  expect_error_everywhere(
      [&] {
        TensorSpace src(Shape{4}, Partition::world(Shape{1}, {0}));
        SendRecv<double>(src, Partition::world(Shape{2}, {1, 0}));
      },
      "one rank");
}

TEST(SendRecv, TensorOfAnotherSpaceIsAnError) {
  const int n = world_size();
  SendRecv<double> op(MPI_COMM_WORLD, Shape{4}, 0, n - 1);
  DistTensor<double> wrong(TensorSpace(Shape{5}, Partition::world(Shape{1}, {0})));
  DistTensor<double> y(op.range());
  try {
    op.forward(wrong, y);
    ADD_FAILURE() << "accepted a tensor of another space";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SendRecv.forward"), std::string::npos) << e.what();
  }
  DistTensor<double> x(op.domain());
  EXPECT_THROW(op.adjoint(wrong, x), Error);
  EXPECT_THROW(op.adjoint(y, wrong), Error);
}
