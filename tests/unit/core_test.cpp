#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/random.hpp"
#include "distop/core/tensor.hpp"

using distop::Shape;
using distop::Tensor;

TEST(Shape, NumelStridesAndText) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.strides(), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
}

TEST(Tensor, ZeroInitialisedAndRoundTrips) {
  Tensor<double> t(Shape{2, 3});
  for (double v : t.to_vector()) EXPECT_EQ(v, 0.0);
  auto u = Tensor<float>::from_vector(Shape{2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(u.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  auto c = u.clone();
  c.fill(7);
  EXPECT_EQ(u.to_vector()[0], 1.0f);  // clone is deep
  auto r = u.reshaped(Shape{4});
  r.fill(5);
  EXPECT_EQ(u.to_vector()[3], 5.0f);  // reshape shares storage
}

// Host storage is recycled: a zero-initialised tensor on a reused block is zero all the same, a
// block comes back for the next tensor of that size, and storage is 64-byte aligned.
TEST(Tensor, RecycledStorageIsZeroedAndAligned) {
  const float* first = nullptr;
  {
    auto t = Tensor<float>::uninitialized(Shape{1000});
    t.fill(3.5f);
    first = t.data();
  }
  Tensor<float> z(Shape{1000});
  if constexpr (std::is_same_v<distop::MemSpace, Kokkos::HostSpace>) {
    EXPECT_EQ(z.data(), first);
  }
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  for (std::int64_t n : {1, 7, 1000, 100000}) {
    auto t = Tensor<double>::uninitialized(Shape{n});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u) << n;
  }
  // Shared storage stays alive while any tensor sharing it does.
  Tensor<float> kept;
  {
    auto t = Tensor<float>::from_vector(Shape{3}, {1, 2, 3});
    kept = t.reshaped(Shape{1, 3});
  }
  auto other = Tensor<float>::uninitialized(Shape{3});
  other.fill(9);
  EXPECT_EQ(kept.to_vector(), (std::vector<float>{1, 2, 3}));
  // fill(-0.0) keeps the sign.
  auto m = Tensor<double>::uninitialized(Shape{2});
  m.fill(-0.0);
  for (double v : m.to_vector()) EXPECT_TRUE(std::signbit(v));
  Tensor<float> empty(Shape{0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.to_vector().empty());
}

TEST(Tensor, BadShapesAreErrors) {
  EXPECT_THROW(Tensor<float>::from_vector(Shape{2, 2}, {1, 2, 3}), distop::Error);
  EXPECT_THROW(Tensor<float>(Shape{2, 2}).reshaped(Shape{3}), distop::Error);
  EXPECT_THROW(Tensor<float>(Shape{-1}), distop::Error);
  Tensor<float> a(Shape{3});
  EXPECT_THROW(a.copy_from(Tensor<float>(Shape{4})), distop::Error);
}

TEST(Random, CounterBasedAndInRange) {
  EXPECT_EQ(distop::random::uniform(7, 123), distop::random::uniform(7, 123));
  EXPECT_NE(distop::random::uniform(7, 123), distop::random::uniform(8, 123));
  double mean = 0, var = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = distop::random::uniform(1, static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const double z = distop::random::normal(1, static_cast<std::uint64_t>(i));
    mean += z;
    var += z * z;
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
}

// The tape's own mechanism, as distop's autodiff layer reaches it.
using Recorder = distop::detail::TapeRecorder;

TEST(Tape, ReplaysInExactReverseOrderAndClears) {
  distop::Tape tape;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i)
    Recorder::record(tape, "op" + std::to_string(i), [&order, i] { order.push_back(i); });
  EXPECT_EQ(tape.size(), 5u);
  EXPECT_EQ(tape.names().front(), "op0");
  tape.backward();
  EXPECT_EQ(order, (std::vector<int>{4, 3, 2, 1, 0}));
  EXPECT_EQ(tape.size(), 0u);
}

TEST(Tape, ClearsEvenWhenAnAdjointThrows) {
  distop::Tape tape;
  Recorder::record(tape, "ok", [] {});
  Recorder::record(tape, "bad", [] { throw distop::Error("test", "boom"); });
  EXPECT_THROW(tape.backward(), distop::Error);
  EXPECT_EQ(tape.size(), 0u);
}

// Counts its live copies through a shared counter (a closure's saved context).
struct Saved {
  std::shared_ptr<int> live;
  explicit Saved(std::shared_ptr<int> l) : live(std::move(l)) { ++*live; }
  Saved(const Saved& o) : live(o.live) { ++*live; }
  Saved(Saved&& o) noexcept : live(o.live) { ++*live; }
  ~Saved() { --*live; }
};

TEST(Tape, ReleasesEachClosureRightAfterItsAdjointRuns) {
  distop::Tape tape;
  auto live = std::make_shared<int>(0);
  std::vector<int> seen;  // live closures when each adjoint ran
  for (int i = 0; i < 3; ++i)
    Recorder::record(tape, "op", [s = Saved(live), &seen] { seen.push_back(*s.live); });
  EXPECT_EQ(*live, 3);
  tape.backward();
  EXPECT_EQ(seen, (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(*live, 0);
}

TEST(Tape, ReusesItsMemoryAcrossSteps) {
  distop::Tape tape;
  auto live = std::make_shared<int>(0);
  // Closures of mixed sizes and alignments, more than the first block holds, over several steps.
  for (int step = 0; step < 4; ++step) {
    double sum = 0;
    for (int i = 0; i < 200; ++i) {
      if (i % 3 == 0) {
        std::array<double, 17> big{};
        big[16] = i;
        Recorder::record(tape, "big", [big, s = Saved(live), &sum] { sum += big[16]; });
      } else {
        Recorder::record(tape, "small", [i, &sum] { sum += i; });
      }
    }
    EXPECT_EQ(tape.size(), 200u);
    tape.backward();
    EXPECT_EQ(sum, 199.0 * 200 / 2);
    EXPECT_EQ(*live, 0);
  }
  Recorder::record(tape, "x", [s = Saved(live)] {});
  tape.clear();
  EXPECT_EQ(*live, 0);
  EXPECT_EQ(tape.size(), 0u);
}

TEST(Tape, ReleasesEverythingWhenAnAdjointThrowsAndStaysUsable) {
  distop::Tape tape;
  auto live = std::make_shared<int>(0);
  bool first_ran = false;
  Recorder::record(tape, "first", [s = Saved(live), &first_ran] { first_ran = true; });
  Recorder::record(tape, "bad", [s = Saved(live)] { throw distop::Error("test", "boom"); });
  Recorder::record(tape, "last", [s = Saved(live)] {});
  EXPECT_THROW(tape.backward(), distop::Error);
  EXPECT_FALSE(first_ran);
  EXPECT_EQ(*live, 0);
  int ran = 0;
  Recorder::record(tape, "again", [&ran] { ++ran; });
  tape.backward();
  EXPECT_EQ(ran, 1);
}

TEST(Tape, MovesWithItsEntriesAndRejectsAnEmptyAdjoint) {
  auto live = std::make_shared<int>(0);
  int ran = 0;
  distop::Tape a;
  Recorder::record(a, "op", [s = Saved(live), &ran] { ++ran; });
  distop::Tape b(std::move(a));
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): a moved-from tape is empty
  distop::Tape c;
  c = std::move(b);
  EXPECT_EQ(*live, 1);
  c.backward();
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(*live, 0);
  EXPECT_THROW(Recorder::record(c, "empty", distop::Tape::Backward()), distop::Error);
  EXPECT_EQ(c.size(), 0u);
}

TEST(Var, AnUndefinedVarIsAnErrorNotACrash) {
  const distop::Var<double> v;
  EXPECT_FALSE(v.defined());
  EXPECT_THROW(v.value(), distop::Error);
  EXPECT_THROW(v.space(), distop::Error);
  EXPECT_THROW(v.grad(), distop::Error);
  EXPECT_FALSE(v.has_grad());
  EXPECT_FALSE(v.requires_grad());
}

TEST(Error, CarriesOperationAndDetail) {
  distop::Error e("Broadcast", "expected [2] found [3]");
  EXPECT_EQ(e.op(), "Broadcast");
  EXPECT_EQ(e.detail(), "expected [2] found [3]");
  EXPECT_NE(std::string(e.what()).find("Broadcast"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos);
}
