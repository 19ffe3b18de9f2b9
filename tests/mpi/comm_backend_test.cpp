// The communication backends (comm/backend.hpp): names and selection, errors for a backend this
// build lacks, the staging backend's round trips on host memory at several sizes (empty, odd,
// across its page granule) against closed forms, and no staging-buffer growth per call once the
// buffers have reached a program's sizes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "distop/comm/backend.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/exchange.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "mpi_test_util.hpp"

using distop::comm::Backend;
using distop::comm::Memory;
using distop::test::world_rank;
using distop::test::world_size;
namespace comm = distop::comm;

namespace {

// Selects `b` for host memory for the scope, then restores what was selected before.
class HostBackend {
 public:
  explicit HostBackend(Backend b) : before_(comm::backend(Memory::kHost)) {
    comm::select_backend(Memory::kHost, b);
  }
  ~HostBackend() { comm::select_backend(Memory::kHost, before_); }
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

 private:
  Backend before_;
};

// A value that names its rank and position, exact in float.
template <class T>
T value(int rank, std::int64_t i) {
  return static_cast<T>(1000 * (rank + 1) + i % 997);
}
// The sum of value(r, i) over every rank.
template <class T>
T sum_over_ranks(int size, std::int64_t i) {
  T s = 0;
  for (int r = 0; r < size; ++r) s += value<T>(r, i);
  return s;
}

// Element counts: empty, one, odd (not a multiple of any vector width), just past the staging
// buffers' 4 KiB granule in bytes, and past MPICH's eager limit (64 KiB) in both types.
const std::vector<std::int64_t> kCounts{0, 1, 7, 1025, 20001};

// Every operation of the call surface once at `count` elements, checked against closed forms.
template <class T>
void round_trips(std::int64_t count) {
  const auto dup = comm::Comm::duplicate(MPI_COMM_WORLD);
  const MPI_Comm c = dup.get();
  const int n = world_size(), me = world_rank();
  const auto size = static_cast<std::size_t>(count);
  SCOPED_TRACE("count " + std::to_string(count));
  std::vector<T> mine(size), out(size);
  for (std::int64_t i = 0; i < count; ++i) mine[static_cast<std::size_t>(i)] = value<T>(me, i);

  // allreduce_sum, out of place and in place.
  comm::allreduce_sum(mine.data(), out.data(), count, c);
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(out[static_cast<std::size_t>(i)], sum_over_ranks<T>(n, i));
  std::vector<T> inplace = mine;
  comm::allreduce_sum(inplace.data(), inplace.data(), count, c);
  EXPECT_EQ(inplace, out);

  // bcast from the last rank.
  const int root = n - 1;
  std::vector<T> b = mine;
  comm::bcast(b.data(), count, root, c);
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(b[static_cast<std::size_t>(i)], value<T>(root, i));

  // bcast_with_copy: the root keeps a copy, the others receive.
  std::vector<T> copy(size, T(-1)), received(size, T(-1));
  comm::bcast_with_copy(mine.data(), me == 0 ? copy.data() : nullptr, received.data(), count, 0, c);
  const std::vector<T>& got = me == 0 ? copy : received;
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(got[static_cast<std::size_t>(i)], value<T>(0, i));

  // reduce_sum onto rank 0, out of place; then in place on the root.
  std::vector<T> reduced(size, T(-1));
  comm::reduce_sum(mine.data(), reduced.data(), count, 0, c);
  if (me == 0) {
    for (std::int64_t i = 0; i < count; ++i)
      ASSERT_EQ(reduced[static_cast<std::size_t>(i)], sum_over_ranks<T>(n, i));
  }
  std::vector<T> acc = mine;
  comm::reduce_sum(me == root ? nullptr : mine.data(), acc.data(), count, root, c);
  if (me == root) {
    for (std::int64_t i = 0; i < count; ++i)
      ASSERT_EQ(acc[static_cast<std::size_t>(i)], sum_over_ranks<T>(n, i));
  }

  // isend/irecv around a ring, and iallreduce_sum.
  const int to = (me + 1) % n, from = (me + n - 1) % n;
  std::vector<T> ring(size, T(-1));
  auto r = comm::irecv(ring.data(), count, from, 5, c);
  auto s = comm::isend(mine.data(), count, to, 5, c);
  s.wait();
  r.wait();
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(ring[static_cast<std::size_t>(i)], value<T>(from, i));
  std::vector<T> nb(size, T(-1));
  auto a = comm::iallreduce_sum(mine.data(), nb.data(), count, c);
  a.wait();
  EXPECT_EQ(nb, out);

  // Exchange: both neighbours at once.
  std::vector<T> left(size, T(-1)), right(size, T(-1));
  {
    comm::Exchange<T> ex(c, 11);
    ex.recv(left.data(), count, from);
    ex.recv(right.data(), count, to);
    ex.send(mine.data(), count, to);
    ex.send(mine.data(), count, from);
    ex.wait();
  }
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(left[static_cast<std::size_t>(i)], value<T>(from, i));
    ASSERT_EQ(right[static_cast<std::size_t>(i)], value<T>(to, i));
  }

  // allreduce_maxloc: the highest rank holds the largest values.
  std::vector<T> mx(size);
  std::vector<int> owner(size, -1);
  comm::allreduce_maxloc(mine.data(), mx.data(), owner.data(), count, c);
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(mx[static_cast<std::size_t>(i)], value<T>(n - 1, i));
    ASSERT_EQ(owner[static_cast<std::size_t>(i)], n - 1);
  }
}

}  // namespace

TEST(CommBackend, NamesRoundTrip) {
  for (Backend b : {Backend::kMpi, Backend::kStaging, Backend::kCudaAwareMpi, Backend::kNccl})
    EXPECT_EQ(comm::parse_backend(comm::to_string(b)), b);
  EXPECT_THROW(comm::parse_backend("infiniband"), distop::Error);
  EXPECT_THROW(comm::parse_backend(""), distop::Error);
}

TEST(CommBackend, WhatEachBackendServes) {
  EXPECT_TRUE(comm::backend_serves(Backend::kMpi, Memory::kHost));
  EXPECT_FALSE(comm::backend_serves(Backend::kMpi, Memory::kDevice));
  EXPECT_TRUE(comm::backend_serves(Backend::kStaging, Memory::kHost));
  EXPECT_TRUE(comm::backend_serves(Backend::kStaging, Memory::kDevice));
  EXPECT_FALSE(comm::backend_serves(Backend::kNccl, Memory::kHost));
  EXPECT_FALSE(comm::backend_serves(Backend::kCudaAwareMpi, Memory::kHost));
  EXPECT_TRUE(comm::backend_available(Backend::kMpi));
  EXPECT_TRUE(comm::backend_available(Backend::kStaging));
#ifdef DISTOP_HAVE_NCCL
  EXPECT_TRUE(comm::backend_available(Backend::kNccl));
#else
  EXPECT_FALSE(comm::backend_available(Backend::kNccl));
#endif
#ifndef DISTOP_HAVE_CUDA
  EXPECT_FALSE(comm::backend_available(Backend::kCudaAwareMpi));
#endif
}

TEST(CommBackend, DefaultsAndTheEnvironmentVariable) {
  const char* env = std::getenv("DISTOP_COMM_BACKEND");
  const std::string chosen = env ? env : "";
  if (chosen == "staging") {
    EXPECT_EQ(comm::backend(Memory::kHost), Backend::kStaging);
    EXPECT_EQ(comm::backend(Memory::kDevice), Backend::kStaging);
    EXPECT_STREQ(comm::device_backend(), "staging");
  } else if (chosen.empty() || chosen == "mpi") {
    EXPECT_EQ(comm::backend(Memory::kHost), Backend::kMpi);
  }
#ifndef DISTOP_HAVE_NCCL
  if (chosen.empty() && !comm::backend_available(Backend::kCudaAwareMpi)) {
    EXPECT_EQ(comm::backend(Memory::kDevice), Backend::kStaging);
  }
#endif
  // A host build's tensors are host memory.
  std::vector<float> v(4);
  if (distop::kHostAccessible) {
    EXPECT_EQ(comm::memory_of(v.data()), Memory::kHost);
  }
}

TEST(CommBackend, SelectingWhatCannotServeThrowsAndChangesNothing) {
  const Backend host = comm::backend(Memory::kHost), dev = comm::backend(Memory::kDevice);
  // The mpi backend reads host memory only.
  try {
    comm::select_backend(Memory::kDevice, Backend::kMpi);
    ADD_FAILURE() << "selected mpi for device memory";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot move device memory"), std::string::npos)
        << e.what();
  }
  if (!comm::backend_available(Backend::kNccl)) {
    try {
      comm::select_backend(Memory::kDevice, Backend::kNccl);
      ADD_FAILURE() << "selected nccl in a build without it";
    } catch (const distop::Error& e) {
      EXPECT_NE(std::string(e.what()).find("not available"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("DISTOP_ENABLE_NCCL"), std::string::npos) << e.what();
    }
  }
  if (!comm::backend_available(Backend::kCudaAwareMpi)) {
    EXPECT_THROW(comm::select_backend(Memory::kDevice, Backend::kCudaAwareMpi), distop::Error);
  }
  EXPECT_THROW(comm::select_backend(Memory::kHost, Backend::kNccl), distop::Error);
  EXPECT_EQ(comm::backend(Memory::kHost), host);
  EXPECT_EQ(comm::backend(Memory::kDevice), dev);
}

TEST(CommBackend, MpiRoundTrips) {
  HostBackend select(Backend::kMpi);
  for (auto count : kCounts) {
    round_trips<double>(count);
    round_trips<float>(count);
  }
}

TEST(CommBackend, StagingRoundTrips) {
  HostBackend select(Backend::kStaging);
  ASSERT_EQ(comm::backend(Memory::kHost), Backend::kStaging);
  for (auto count : kCounts) {
    round_trips<double>(count);
    round_trips<float>(count);
  }
  EXPECT_GT(comm::staging_stats().buffers, 0);
}

TEST(CommBackend, StagingBuffersDoNotGrowAfterWarmUp) {
  HostBackend select(Backend::kStaging);
  for (auto count : kCounts) round_trips<double>(count);  // warm-up: the buffers reach their sizes
  const auto warm = comm::staging_stats();
  EXPECT_GT(warm.growths, 0);
  EXPECT_GE(warm.bytes, static_cast<std::int64_t>(kCounts.back() * sizeof(double)));
  for (int step = 0; step < 3; ++step)
    for (auto count : kCounts) round_trips<double>(count);
  const auto after = comm::staging_stats();
  EXPECT_EQ(after.growths, warm.growths) << "staging buffers were allocated per call";
  EXPECT_EQ(after.buffers, warm.buffers);
  EXPECT_EQ(after.bytes, warm.bytes);
}

// Run with DISTOP_COMM_BACKEND naming a backend this build lacks (a CTest entry does): the first
// call that picks a backend throws a distop::Error that says which and why.
TEST(CommBackend, UnavailableBackendInTheEnvironmentIsAnError) {
  const char* env = std::getenv("DISTOP_COMM_BACKEND");
  if (!env || comm::backend_available(comm::parse_backend(env)))
    GTEST_SKIP() << "DISTOP_COMM_BACKEND does not name a backend missing from this build";
  try {
    (void)comm::backend(Memory::kHost);
    ADD_FAILURE() << "DISTOP_COMM_BACKEND=" << env << " was accepted";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DISTOP_COMM_BACKEND"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not available"), std::string::npos) << e.what();
  }
  std::vector<double> x(3, 1.0);
  EXPECT_THROW(comm::allreduce_sum(x.data(), x.data(), 3, MPI_COMM_WORLD), distop::Error);
}

TEST(CommBackend, ProducerStreamScopesNestAndRestore) {
  EXPECT_EQ(comm::ProducerStream::current(), nullptr);
  int a = 0, b = 0;
  {
    comm::ProducerStream outer(&a);
    EXPECT_EQ(comm::ProducerStream::current(), &a);
    {
      comm::ProducerStream inner(&b);
      EXPECT_EQ(comm::ProducerStream::current(), &b);
    }
    EXPECT_EQ(comm::ProducerStream::current(), &a);
  }
  EXPECT_EQ(comm::ProducerStream::current(), nullptr);
}
