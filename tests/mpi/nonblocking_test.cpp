// Nonblocking transfers on the tape: start ... compute ... wait gives the same values and gradients
// as the blocking operators, with the compute (local and communicating) overlapping the transfer in
// the forward pass and its reverse in the backward pass.
#include "distop/autodiff/nonblocking.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/linear.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

// Values that depend on the global index only (so the destination can predict what it receives).
template <class T>
DistTensor<T> indexed(const TensorSpace& space, std::uint64_t seed) {
  return test::random_tensor<T>(space, seed);
}

template <class T>
void set_grad(const Var<T>& v, const DistTensor<T>& g) {
  v.grad().local().copy_from(g.local());
}

template <class T>
std::vector<T> values(const DistTensor<T>& t) {
  return t.local().to_vector();
}

struct Outcome {
  std::vector<double> y, h, dx, dz, dw;
  std::vector<std::string> names;
};

// x moves from rank 0 to the last rank; meanwhile every rank computes h = Linear(sum(relu(z))),
// with an all-sum-reduce over the world in the middle. Both output gradients are seeded, then the
// tape is replayed.
Outcome send_recv_with_compute(bool nonblocking) {
  const int n = world_size();
  auto op = std::make_shared<const SendRecv<double>>(MPI_COMM_WORLD, Shape{4, 3}, 0, n - 1);
  Partition world = Partition::world(Shape{n});
  TensorSpace zs(world, Decomposition::balanced(Shape{2, 3}, world.shape(), {-1, -1}));
  auto sum = std::make_shared<const AllSumReduce<double>>(zs, std::vector<int>{0});
  nn::Linear<double> lin(3, 2, world, {.seed = 11});
  Var<double> x(indexed<double>(op->domain(), 1), true);
  Var<double> z(distop::testing::random_tensor<double>(zs, 2), true);

  Tape tape;
  Var<double> y, h;
  auto compute = [&] { return lin.forward(tape, apply<double>(tape, sum, nn::relu(tape, z))); };
  if (nonblocking) {
    auto pending = start(tape, op, x);
    h = compute();
    y = wait(tape, pending);
  } else {
    y = apply<double>(tape, op, x);
    h = compute();
  }
  Outcome o;
  o.names = tape.names();
  o.y = values(y.value());
  o.h = values(h.value());
  set_grad(y, indexed<double>(op->range(), 3));
  set_grad(h, distop::testing::random_tensor<double>(h.space(), 4));
  tape.backward();
  o.dx = values(x.grad());
  o.dz = values(z.grad());
  o.dw = values(lin.weight().grad());
  return o;
}

}  // namespace

TEST(NonblockingSendRecv, OverlappedComputeMatchesBlockingInBothDirections) {
  const auto blocking = send_recv_with_compute(false);
  const auto overlapped = send_recv_with_compute(true);
  EXPECT_EQ(overlapped.names, (std::vector<std::string>{"SendRecv.start", "relu", "AllSumReduce",
                                                        "Linear", "SendRecv.wait"}));
  EXPECT_EQ(overlapped.y, blocking.y);
  EXPECT_EQ(overlapped.h, blocking.h);
  EXPECT_EQ(overlapped.dx, blocking.dx);
  EXPECT_EQ(overlapped.dz, blocking.dz);
  EXPECT_EQ(overlapped.dw, blocking.dw);

  // And both are right: the destination holds x, the source receives dy.
  const int n = world_size();
  SendRecv<double> op(MPI_COMM_WORLD, Shape{4, 3}, 0, n - 1);
  const auto expect_y = values(indexed<double>(op.range(), 1));
  const auto expect_dx = values(indexed<double>(op.domain(), 3));
  EXPECT_EQ(overlapped.y, expect_y);
  EXPECT_EQ(overlapped.dx, expect_dx);
  if (world_rank() == n - 1) {
    EXPECT_EQ(overlapped.y.size(), 12u);
  }
  if (world_rank() == 0) {
    EXPECT_EQ(overlapped.dx.size(), 12u);
  }
}

namespace {

// Two transfers in opposite directions in flight together (first rank <-> last rank), waited for
// in the other order than they were started, with compute between.
template <class T>
void criss_cross() {
  const int n = world_size();
  auto a = std::make_shared<const SendRecv<T>>(MPI_COMM_WORLD, Shape{5}, 0, n - 1);
  auto b = std::make_shared<const SendRecv<T>>(MPI_COMM_WORLD, Shape{2, 3}, n - 1, 0);
  Var<T> xa(indexed<T>(a->domain(), 10), true);
  Var<T> xb(indexed<T>(b->domain(), 11), true);
  TensorSpace zs = test::local_batch_space(3, 2);
  Var<T> z(indexed<T>(zs, 12), true);

  Tape tape;
  auto pa = start(tape, a, xa);
  auto pb = start(tape, b, xb);
  EXPECT_TRUE(pa.pending() && pb.pending());
  auto r = nn::relu(tape, z);
  auto yb = wait(tape, pb);
  auto ya = wait(tape, pa);
  EXPECT_FALSE(pa.pending() || pb.pending());
  EXPECT_EQ(tape.names(), (std::vector<std::string>{"SendRecv.start", "SendRecv.start", "relu",
                                                    "SendRecv.wait", "SendRecv.wait"}));
  EXPECT_EQ(values(ya.value()), values(indexed<T>(a->range(), 10)));
  EXPECT_EQ(values(yb.value()), values(indexed<T>(b->range(), 11)));

  set_grad(ya, indexed<T>(a->range(), 20));
  set_grad(yb, indexed<T>(b->range(), 21));
  const auto dr = indexed<T>(zs, 22);
  set_grad(r, dr);
  tape.backward();
  EXPECT_EQ(values(xa.grad()), values(indexed<T>(a->domain(), 20)));
  EXPECT_EQ(values(xb.grad()), values(indexed<T>(b->domain(), 21)));
  const auto zv = values(z.value()), dzv = values(z.grad()), drv = values(dr);
  for (std::size_t i = 0; i < zv.size(); ++i) EXPECT_EQ(dzv[i], zv[i] > 0 ? drv[i] : T(0));
}

}  // namespace

TEST(NonblockingSendRecv, OppositeTransfersInFlightTogetherDouble) { criss_cross<double>(); }
TEST(NonblockingSendRecv, OppositeTransfersInFlightTogetherFloat) { criss_cross<float>(); }

TEST(NonblockingSendRecv, TwoTransfersOnOneOperatorMatchInOrder) {
  const int n = world_size();
  auto op = std::make_shared<const SendRecv<double>>(MPI_COMM_WORLD, Shape{6}, n - 1, 0);
  Var<double> x1(indexed<double>(op->domain(), 1), true);
  Var<double> x2(indexed<double>(op->domain(), 2), true);
  Tape tape;
  auto p1 = start(tape, op, x1);
  auto p2 = start(tape, op, x2);
  auto y2 = wait(tape, p2);
  auto y1 = wait(tape, p1);
  EXPECT_EQ(values(y1.value()), values(indexed<double>(op->range(), 1)));
  EXPECT_EQ(values(y2.value()), values(indexed<double>(op->range(), 2)));
  set_grad(y1, indexed<double>(op->range(), 3));
  set_grad(y2, indexed<double>(op->range(), 4));
  tape.backward();
  EXPECT_EQ(values(x1.grad()), values(indexed<double>(op->domain(), 3)));
  EXPECT_EQ(values(x2.grad()), values(indexed<double>(op->domain(), 4)));
}

TEST(NonblockingSendRecv, AGradientThatNeverReachedYSendsZeros) {
  const int n = world_size();
  auto op = std::make_shared<const SendRecv<double>>(MPI_COMM_WORLD, Shape{3}, 0, n - 1);
  Var<double> x(indexed<double>(op->domain(), 1), true);
  Tape tape;
  auto p = start(tape, op, x);
  auto y = wait(tape, p);
  tape.backward();  // y never received a gradient
  EXPECT_EQ(values(x.grad()), std::vector<double>(world_rank() == 0 ? 3 : 0, 0.0));
}

TEST(NonblockingSendRecv, WithoutGradientsNothingIsRecorded) {
  const int n = world_size();
  auto op = std::make_shared<const SendRecv<double>>(MPI_COMM_WORLD, Shape{3}, 0, n - 1);
  Var<double> x(indexed<double>(op->domain(), 1));
  Tape tape;
  auto p = start(tape, op, x);
  auto y = wait(tape, p);
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(values(y.value()), values(indexed<double>(op->range(), 1)));
}

TEST(NonblockingSendRecv, MisuseIsAnError) {
  const int n = world_size();
  auto op = std::make_shared<const SendRecv<double>>(MPI_COMM_WORLD, Shape{3}, 0, n - 1);
  Var<double> x(indexed<double>(op->domain(), 1), true);
  Tape tape, other;
  Pending<double> never;
  EXPECT_THROW(wait(tape, never), Error);
  auto p = start(tape, op, x);
  auto copy = p;
  EXPECT_THROW(wait(other, p), Error);  // not the tape it started on; still pending
  EXPECT_TRUE(p.pending());
  auto y = wait(tape, p);
  EXPECT_THROW(wait(tape, copy), Error);  // already waited for
  EXPECT_EQ(values(y.value()), values(indexed<double>(op->range(), 1)));
  // The wrong input space, agreed from metadata on every rank before anything is posted.
  Var<double> wrong(DistTensor<double>(TensorSpace(Shape{4}, Partition::world(Shape{1}, {0}))),
                    true);
  EXPECT_THROW(start(tape, op, wrong), Error);
  tape.clear();
}

namespace {

// An integer-valued tensor (exact sums in any order): global index + 100 (parent rank + 1) + seed.
DistTensor<double> integers(const TensorSpace& space, int seed) {
  auto idx = space.global_indices();
  std::vector<double> v(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i)
    v[i] = static_cast<double>(idx[i] + 100 * (world_rank() + 1) + seed);
  DistTensor<double> t(space);
  t.local().copy_from(Tensor<double>::from_vector(space.local_shape(), v));
  return t;
}

struct ReduceOutcome {
  std::vector<double> y, dx, dz;
};

ReduceOutcome all_sum_reduce_with_compute(const TensorSpace& space, std::vector<int> axes,
                                          bool nonblocking) {
  auto op = std::make_shared<const AllSumReduce<double>>(space, axes);
  Var<double> x(integers(space, 1), true);
  Var<double> z(integers(space, 2), true);
  Tape tape;
  Var<double> y, r;
  if (nonblocking) {
    auto p = start(tape, op, x);
    r = nn::relu(tape, z);
    y = wait(tape, p);
    EXPECT_EQ(tape.names(),
              (std::vector<std::string>{"AllSumReduce.start", "relu", "AllSumReduce.wait"}));
  } else {
    y = apply<double>(tape, op, x);
    r = nn::relu(tape, z);
  }
  ReduceOutcome o;
  o.y = values(y.value());
  set_grad(y, integers(space, 3));
  set_grad(r, integers(space, 4));
  tape.backward();
  o.dx = values(x.grad());
  o.dz = values(z.grad());
  return o;
}

TensorSpace replicated(const Shape& grid, std::vector<int> ranks = {}) {
  return TensorSpace(Partition::world(grid, std::move(ranks)),
                     Decomposition::balanced(Shape{3, 8}, grid, {-1, 1}));
}

}  // namespace

TEST(NonblockingAllSumReduce, OverlappedComputeMatchesBlocking) {
  const int n = world_size();
  std::vector<TensorSpace> spaces{replicated(Shape{n, 1})};
  if (n >= 2) spaces.push_back(replicated(Shape{2, 1}, {n - 1, 0}));  // idle ranks at n > 2
  if (n >= 4) spaces.push_back(replicated(Shape{2, 2}));
  for (const auto& s : spaces) {
    SCOPED_TRACE(s.str());
    const auto blocking = all_sum_reduce_with_compute(s, {0}, false);
    const auto overlapped = all_sum_reduce_with_compute(s, {0}, true);
    EXPECT_EQ(overlapped.y, blocking.y);
    EXPECT_EQ(overlapped.dx, blocking.dx);
    EXPECT_EQ(overlapped.dz, blocking.dz);
    // The closed form: each entry sums the members' contributions; dx is the sum of dy likewise.
    const int g = s.partition().active() ? static_cast<int>(s.partition().shape()[0]) : 0;
    const auto idx = s.global_indices();
    int member_sum = 0;  // sum of 100 (rank + 1) over this rank's group
    if (g > 0) {
      int mine = 100 * (world_rank() + 1);
      MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_SUM, s.partition().axes_comm({0}));
      member_sum = mine;
    }
    ASSERT_EQ(overlapped.y.size(), idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(overlapped.y[i], static_cast<double>(g * (idx[i] + 1) + member_sum));
      EXPECT_EQ(overlapped.dx[i], static_cast<double>(g * (idx[i] + 3) + member_sum));
    }
  }
}
