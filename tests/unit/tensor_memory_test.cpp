// distop::tensor_memory(): the host tensor storage a process holds, now and at its peak.
#include <gtest/gtest.h>

#include <optional>

#include "distop/core/memory.hpp"
#include "distop/core/tensor.hpp"

using distop::HostTensor;
using distop::Shape;

// A tensor counts from its allocation until its last copy dies, at its size class (at most a
// quarter above what it asked for); the peak keeps the most held at once until it is reset, and
// a cached block reused by the next tensor counts again.
TEST(TensorMemory, CountsLiveTensorsAndTheirPeak) {
  constexpr std::size_t kBytes = 1'000'000 * sizeof(float);
  distop::reset_peak_tensor_memory();
  const auto before = distop::tensor_memory();
  EXPECT_EQ(before.peak_bytes, before.in_use_bytes);
  {
    std::optional<HostTensor<float>> a(HostTensor<float>(Shape{1'000'000}));
    const auto with_a = distop::tensor_memory();
    EXPECT_GE(with_a.in_use_bytes - before.in_use_bytes, kBytes);
    EXPECT_LE(with_a.in_use_bytes - before.in_use_bytes, kBytes + kBytes / 4);
    {
      HostTensor<float> copy = *a;  // shares a's storage: nothing more
      EXPECT_EQ(distop::tensor_memory().in_use_bytes, with_a.in_use_bytes);
      a.reset();
      EXPECT_EQ(distop::tensor_memory().in_use_bytes, with_a.in_use_bytes) << "copy still holds it";
    }
    EXPECT_EQ(distop::tensor_memory().in_use_bytes, before.in_use_bytes);
    HostTensor<float> b(Shape{1'000'000});  // the cached block again
    HostTensor<float> c(Shape{1'000'000});
    const auto both = distop::tensor_memory();
    EXPECT_GE(both.in_use_bytes - before.in_use_bytes, 2 * kBytes);
    EXPECT_EQ(both.peak_bytes, both.in_use_bytes);
  }
  const auto after = distop::tensor_memory();
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_GE(after.peak_bytes - before.in_use_bytes, 2 * kBytes);
  distop::reset_peak_tensor_memory();
  EXPECT_EQ(distop::tensor_memory().peak_bytes, before.in_use_bytes);
}
