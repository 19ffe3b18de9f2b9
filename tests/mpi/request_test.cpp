// comm::Request: destroyed without a wait it neither blocks nor throws, a receive is cancelled and
// does not take a later message, and a send still delivers its data with the buffer held for it; a
// moved request is waited for once; a failing MPI call is a distop::Error with MPI's message.
// The v-collectives (ialltoallv, iallgatherv, allgatherv) at the end.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "mpi_test_util.hpp"

using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr int kTag = 7;

// A value that names its sender and position.
double tagged(int sender, std::int64_t i) { return 1e6 * sender + static_cast<double>(i); }

}  // namespace

TEST(Request, AbandonedReceiveIsCancelledAndTakesNoLaterMessage) {
  const auto dup = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm comm = dup.get();
  const int n = world_size(), me = world_rank();
  const int from = (me + n - 1) % n, to = (me + 1) % n;
  std::vector<double> lost(4, -1.0);
  {
    auto r = distop::comm::irecv(lost.data(), 4, from, kTag, comm);
    EXPECT_TRUE(r.active());
  }  // nothing was sent: the receive is cancelled here
  ASSERT_EQ(MPI_Barrier(comm), MPI_SUCCESS);
  // The same source and tag now reach a fresh receive, not the cancelled one.
  std::vector<double> out{tagged(me, 0), tagged(me, 1), tagged(me, 2), tagged(me, 3)};
  std::vector<double> in(4, -1.0);
  auto recv = distop::comm::irecv(in.data(), 4, from, kTag, comm);
  auto send = distop::comm::isend(out.data(), 4, to, kTag, comm);
  send.wait();
  recv.wait();
  EXPECT_FALSE(recv.active());
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(in[static_cast<std::size_t>(i)], tagged(from, i));
  EXPECT_EQ(lost, std::vector<double>(4, -1.0));
}

TEST(Request, AbandonedSendStillDeliversFromTheBufferItHolds) {
  const auto dup = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm comm = dup.get();
  const int n = world_size(), me = world_rank();
  const int from = (me + n - 1) % n, to = (me + 1) % n;
  // 1 MiB: past the eager limit, so the data moves after the sender has let go of its request.
  constexpr std::int64_t kCount = std::int64_t{1} << 17;
  {
    auto buffer = std::make_shared<std::vector<double>>(static_cast<std::size_t>(kCount));
    for (std::int64_t i = 0; i < kCount; ++i)
      (*buffer)[static_cast<std::size_t>(i)] = tagged(me, i);
    auto r = distop::comm::isend(buffer->data(), kCount, to, kTag, comm);
    r.keep_alive(buffer);
  }  // the request and this scope's reference to the buffer are gone; the send is not complete
  std::vector<double> in(static_cast<std::size_t>(kCount), -1.0);
  ASSERT_EQ(MPI_Recv(in.data(), static_cast<int>(kCount), MPI_DOUBLE, from, kTag, comm,
                     MPI_STATUS_IGNORE),
            MPI_SUCCESS);
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < kCount; ++i)
    if (in[static_cast<std::size_t>(i)] != tagged(from, i)) ++wrong;
  EXPECT_EQ(wrong, 0);
  ASSERT_EQ(MPI_Barrier(comm), MPI_SUCCESS);
}

TEST(Request, MovedRequestIsWaitedForOnce) {
  const auto dup = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm comm = dup.get();
  const int n = world_size(), me = world_rank();
  double out = tagged(me, 0), in = -1;
  auto recv = distop::comm::irecv(&in, 1, (me + n - 1) % n, kTag, comm);
  distop::comm::Request moved(std::move(recv));
  EXPECT_FALSE(recv.active());  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_TRUE(moved.active());
  auto send = distop::comm::isend(&out, 1, (me + 1) % n, kTag, comm);
  recv.wait();  // a no-op
  moved.wait();
  send.wait();
  EXPECT_EQ(in, tagged((me + n - 1) % n, 0));
  EXPECT_FALSE(moved.active());
  moved.wait();  // a no-op once complete
}

// An MPI call that fails returns its code (distop sets MPI_ERRORS_RETURN) and becomes a
// distop::Error naming the operation, the call and MPI's own message.
TEST(Request, AFailedMpiCallIsAnErrorWithMpisMessage) {
  const auto dup = distop::comm::Comm::duplicate(MPI_COMM_WORLD);
  const double x = 1;
  try {
    auto r = distop::comm::isend(&x, 1, world_size() + 3, kTag, dup.get());  // no such rank
    ADD_FAILURE() << "a send to a rank outside the communicator was posted";
  } catch (const distop::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("isend"), std::string::npos) << what;
    EXPECT_NE(what.find("MPI_Isend"), std::string::npos) << what;
    EXPECT_NE(what.find("failed: "), std::string::npos) << what;
    EXPECT_GT(what.size(), what.find("failed: ") + 8) << "no MPI message: " << what;
  }
}

// comm::ialltoallv, comm::iallgatherv and comm::allgatherv against what MPI_Alltoallv and
// MPI_Allgatherv define: blocks of different sizes (some empty) at displacements with gaps between
// them, which stay untouched (the staging backend copies only the blocks). Completed through
// Request::test, which returns true once and for all.
namespace {

// Rank s's block for rank d: (s + 2 d) % 3 entries (some empty).
int block_count(int sender, int receiver) { return (sender + 2 * receiver) % 3; }

// Counts and displacements of `counts`, one sentinel entry of gap before each block.
std::vector<int> gapped_displs(const std::vector<int>& counts, int& total) {
  std::vector<int> displs(counts.size());
  total = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    displs[q] = total + 1;
    total += 1 + counts[q];
  }
  return displs;
}

constexpr double kGap = -7.0;

}  // namespace

TEST(VCollectives, IalltoallvMovesEachBlockAndLeavesTheGapsAlone) {
  const int n = world_size(), me = world_rank();
  std::vector<int> send_counts(n), recv_counts(n);
  for (int q = 0; q < n; ++q) {
    send_counts[q] = block_count(me, q);
    recv_counts[q] = block_count(q, me);
  }
  int send_total = 0, recv_total = 0;
  const auto send_displs = gapped_displs(send_counts, send_total);
  const auto recv_displs = gapped_displs(recv_counts, recv_total);
  std::vector<double> send(static_cast<std::size_t>(send_total), kGap);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < send_counts[q]; ++i) send[send_displs[q] + i] = tagged(me, 10 * q + i);
  std::vector<double> recv(static_cast<std::size_t>(recv_total), kGap);
  auto r =
      distop::comm::ialltoallv(send.data(), send_counts.data(), send_displs.data(), recv.data(),
                               recv_counts.data(), recv_displs.data(), MPI_COMM_WORLD);
  while (!r.test()) {
  }
  EXPECT_FALSE(r.active());
  EXPECT_TRUE(r.test());
  r.wait();  // a no-op now
  std::vector<double> expected(static_cast<std::size_t>(recv_total), kGap);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < recv_counts[q]; ++i) expected[recv_displs[q] + i] = tagged(q, 10 * me + i);
  EXPECT_EQ(recv, expected);
}

TEST(VCollectives, IallgathervInPlaceAndAllgathervGiveEveryRanksBlock) {
  const int n = world_size(), me = world_rank();
  std::vector<int> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = block_count(q, 1);
  int total = 0;
  const auto displs = gapped_displs(counts, total);
  std::vector<double> expected(static_cast<std::size_t>(total), kGap);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < counts[q]; ++i) expected[displs[q] + i] = tagged(q, i);

  std::vector<double> buf(static_cast<std::size_t>(total), kGap);
  for (int i = 0; i < counts[me]; ++i) buf[displs[me] + i] = tagged(me, i);
  distop::comm::iallgatherv(buf.data(), counts.data(), displs.data(), MPI_COMM_WORLD).wait();
  EXPECT_EQ(buf, expected);

  std::vector<double> mine(static_cast<std::size_t>(counts[me]));
  for (int i = 0; i < counts[me]; ++i) mine[i] = tagged(me, i);
  std::vector<double> out(static_cast<std::size_t>(total), kGap);
  distop::comm::allgatherv(mine.data(), counts[me], out.data(), counts.data(), displs.data(),
                           MPI_COMM_WORLD);
  EXPECT_EQ(out, expected);
}

// The pairwise schedule (comm::ExchangeSchedule::pairwise): the same bits as MPI_Alltoallv and
// MPI_Allgatherv (called directly, as the reference) for windows of 1 round, 2 rounds and more
// rounds than there are, with empty blocks, driven by Request::test() alone; two exchanges in
// flight on one communicator keep their messages apart; one destroyed mid-way neither blocks nor
// throws, and later exchanges on the communicator are unaffected.
namespace {

using distop::comm::ExchangeSchedule;

std::vector<ExchangeSchedule> schedules_to_test() {
  return {ExchangeSchedule::collective(), ExchangeSchedule::pairwise(1),
          ExchangeSchedule::pairwise(2), ExchangeSchedule::pairwise(world_size() + 3)};
}

// Rank s's block for rank d: 0, 3 or 6 entries, offset by `salt`.
int pairwise_count(int sender, int receiver) { return 3 * ((sender + 2 * receiver) % 3); }

struct Alltoallv {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<double> send, recv, expected;

  explicit Alltoallv(double salt) {
    const int n = world_size(), me = world_rank();
    send_counts.resize(n);
    recv_counts.resize(n);
    for (int q = 0; q < n; ++q) {
      send_counts[q] = pairwise_count(me, q);
      recv_counts[q] = pairwise_count(q, me);
    }
    int send_total = 0, recv_total = 0;
    send_displs = gapped_displs(send_counts, send_total);
    recv_displs = gapped_displs(recv_counts, recv_total);
    send.assign(static_cast<std::size_t>(send_total), kGap);
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < send_counts[q]; ++i)
        send[send_displs[q] + i] = salt + tagged(me, 10 * q + i);
    recv.assign(static_cast<std::size_t>(recv_total), kGap);
    expected = recv;
    MPI_Alltoallv(send.data(), send_counts.data(), send_displs.data(), MPI_DOUBLE, expected.data(),
                  recv_counts.data(), recv_displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  }

  distop::comm::Request post(ExchangeSchedule schedule) {
    return distop::comm::ialltoallv(send.data(), send_counts.data(), send_displs.data(),
                                    recv.data(), recv_counts.data(), recv_displs.data(),
                                    MPI_COMM_WORLD, schedule);
  }
};

std::string describe(const ExchangeSchedule& s) {
  return s.form == ExchangeSchedule::Form::kCollective
             ? std::string("collective")
             : "pairwise(" + std::to_string(s.window) + ")";
}

}  // namespace

TEST(PairwiseExchange, IalltoallvGivesMpiAlltoallvsBitsForEveryWindow) {
  for (const auto& schedule : schedules_to_test()) {
    SCOPED_TRACE(describe(schedule));
    Alltoallv a(0.5);
    auto r = a.post(schedule);
    while (!r.test()) {
    }
    EXPECT_FALSE(r.active());
    EXPECT_EQ(a.recv, a.expected);
  }
}

TEST(PairwiseExchange, IallgathervGivesMpiAllgathervsBitsForEveryWindow) {
  const int n = world_size(), me = world_rank();
  std::vector<int> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = pairwise_count(q, 1);
  int total = 0;
  const auto displs = gapped_displs(counts, total);
  std::vector<double> start(static_cast<std::size_t>(total), kGap);
  for (int i = 0; i < counts[me]; ++i) start[displs[me] + i] = tagged(me, i);
  auto expected = start;
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, expected.data(), counts.data(), displs.data(),
                 MPI_DOUBLE, MPI_COMM_WORLD);
  for (const auto& schedule : schedules_to_test()) {
    SCOPED_TRACE(describe(schedule));
    auto buf = start;
    auto r = distop::comm::iallgatherv(buf.data(), counts.data(), displs.data(), MPI_COMM_WORLD,
                                       schedule);
    while (!r.test()) {
    }
    EXPECT_EQ(buf, expected);
  }
}

TEST(PairwiseExchange, TwoExchangesInFlightOnOneCommunicatorKeepTheirMessagesApart) {
  Alltoallv a(0.25), b(0.75);
  auto ra = a.post(ExchangeSchedule::pairwise(1));
  auto rb = b.post(ExchangeSchedule::pairwise(1));
  // Driven in the other order than posted, the second completed by wait().
  while (!rb.test()) {
  }
  ra.wait();
  EXPECT_EQ(a.recv, a.expected);
  EXPECT_EQ(b.recv, b.expected);
}

TEST(PairwiseExchange, AbandonedMidwayNeitherBlocksNorThrowsAndLaterExchangesWork) {
  {
    Alltoallv a(0.5);
    auto r = a.post(ExchangeSchedule::pairwise(1));
    r.test();
    // Destroyed here, most rounds not posted yet. Its buffers outlive it (the test's frame).
    EXPECT_NO_THROW({ auto gone = std::move(r); });
    EXPECT_FALSE(r.active());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  Alltoallv b(1.5);
  b.post(ExchangeSchedule::pairwise(2)).wait();
  EXPECT_EQ(b.recv, b.expected);
}

TEST(PairwiseExchange, AWindowBelowOneRoundIsAnError) {
  Alltoallv a(0.0);
  EXPECT_THROW(a.post(ExchangeSchedule::pairwise(0)), distop::Error);
}

// A pairwise all-to-all copies the rank's own block locally, so it must send itself as many
// entries as it receives from itself: otherwise a distop::Error, before any message is posted.
TEST(PairwiseExchange, UnequalCountsForTheRanksOwnBlockAreAnError) {
  const int n = world_size(), me = world_rank();
  std::vector<int> send_counts(n, 1), recv_counts(n, 1), displs(n);
  for (int q = 0; q < n; ++q) displs[q] = q;
  send_counts[me] = 0;
  std::vector<float> send(n, 1.0f), recv(n, 0.0f);
  EXPECT_THROW(distop::comm::ialltoallv(send.data(), send_counts.data(), displs.data(), recv.data(),
                                        recv_counts.data(), displs.data(), MPI_COMM_WORLD,
                                        ExchangeSchedule::pairwise(1)),
               distop::Error);
}
