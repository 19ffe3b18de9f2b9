// OpenBLAS's kernels as distop chooses them when it loads (src/kernels/blas_kernels.hpp).
#include "../../src/kernels/blas_kernels.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <distop/distop.hpp>
#include <string>

namespace {

using namespace distop;
using kernels::detail::CpuVectors;
using kernels::detail::faster_openblas_core;

constexpr CpuVectors kAvx512{.avx2_fma = true, .avx512 = true};
constexpr CpuVectors kAvx2{.avx2_fma = true, .avx512 = false};
constexpr CpuVectors kSse{};

TEST(BlasKernels, PreAvx2FallbacksAreReplacedByTheCpusWidest) {
  for (const char* old : {"Prescott", "Core2", "Nehalem", "Sandybridge", "Barcelona", "Unknown"}) {
    EXPECT_STREQ(faster_openblas_core(old, false, kAvx512), "SkylakeX") << old;
    EXPECT_STREQ(faster_openblas_core(old, false, kAvx2), "Haswell") << old;
    EXPECT_EQ(faster_openblas_core(old, false, kSse), nullptr) << old;
  }
}

TEST(BlasKernels, OpenblasChoiceStandsWhereItIsAvx2OrNewerOrUnknownToDistop) {
  for (const char* fast : {"Haswell", "Zen", "Excavator", "SkylakeX", "Cooperlake",
                           "SapphireRapids", "SomeFutureCore"})
    EXPECT_EQ(faster_openblas_core(fast, false, kAvx512), nullptr) << fast;
}

TEST(BlasKernels, TheUsersChoiceStands) {
  EXPECT_EQ(faster_openblas_core("Prescott", true, kAvx512), nullptr);
  EXPECT_EQ(faster_openblas_core("Prescott", true, kAvx2), nullptr);
}

// sgemm of a 65 x 33 by 33 x 17 product against the sum in double.
void expect_gemm_right() {
  const std::int64_t m = 65, k = 33, n = 17;
  Tensor<float> a(Shape{m, k}), b(Shape{k, n}), c(Shape{m, n});
  for (std::int64_t i = 0; i < m * k; ++i) a.data()[i] = static_cast<float>((i * 7) % 11) - 5;
  for (std::int64_t i = 0; i < k * n; ++i) b.data()[i] = static_cast<float>((i * 5) % 13) - 6;
  kernels::gemm(kernels::Op::N, kernels::Op::N, 1.0f, a, b, 0.0f, c);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < k; ++p) sum += a.data()[i * k + p] * b.data()[p * n + j];
      ASSERT_EQ(c.data()[i * n + j], static_cast<float>(sum)) << i << ", " << j;
    }
}

// Restores OPENBLAS_CORETYPE and OpenBLAS's kernels as the test found them.
class OpenblasState : public ::testing::Test {
 protected:
  void SetUp() override {
    core_ = std::string(kernels::detail::openblas_core());
    if (core_.empty()) GTEST_SKIP() << "distop was built without OpenBLAS";
    if (const char* v = std::getenv("OPENBLAS_CORETYPE")) variable_ = v;
    had_variable_ = std::getenv("OPENBLAS_CORETYPE") != nullptr;
    // An OpenBLAS built for one target cannot switch.
    if (!kernels::detail::switch_openblas_core(core_.c_str()))
      GTEST_SKIP() << "OpenBLAS (" << core_ << ") cannot switch kernels (no DYNAMIC_ARCH)";
  }
  void TearDown() override {
    if (core_.empty()) return;
    kernels::detail::switch_openblas_core(core_.c_str());
    if (had_variable_)
      setenv("OPENBLAS_CORETYPE", variable_.c_str(), 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
  }
  std::string core_, variable_;
  bool had_variable_ = false;
};

TEST_F(OpenblasState, SwitchingKernelsKeepsTheVariableAndTheResults) {
  setenv("OPENBLAS_CORETYPE", "Nehalem", 1);
  ASSERT_TRUE(kernels::detail::switch_openblas_core("Prescott"));
  EXPECT_EQ(kernels::detail::openblas_core(), "Prescott");
  EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), "Nehalem");
  expect_gemm_right();
  if (!kernels::detail::cpu_vectors().avx2_fma) return;
  ASSERT_TRUE(kernels::detail::switch_openblas_core("Haswell"));
  EXPECT_EQ(kernels::detail::openblas_core(), "Haswell");
  expect_gemm_right();
}

// What a CPU that OpenBLAS does not recognise gets: Prescott, then distop's choice on load.
TEST_F(OpenblasState, APrescottFallbackIsReplacedUnlessTheUserChoseIt) {
  ASSERT_TRUE(kernels::detail::switch_openblas_core("Prescott"));
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  kernels::detail::choose_blas_kernels();
  EXPECT_EQ(kernels::detail::openblas_core(), "Prescott");
  EXPECT_FALSE(kernels::detail::blas_kernels_slow()) << "the user chose these kernels";

  unsetenv("OPENBLAS_CORETYPE");
  const CpuVectors cpu = kernels::detail::cpu_vectors();
  EXPECT_EQ(kernels::detail::blas_kernels_slow(), cpu.avx2_fma);
  kernels::detail::choose_blas_kernels();
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr);
  const std::string expected = cpu.avx512 ? "SkylakeX" : cpu.avx2_fma ? "Haswell" : "Prescott";
  EXPECT_EQ(kernels::detail::openblas_core(), expected);
  EXPECT_FALSE(kernels::detail::blas_kernels_slow());
  expect_gemm_right();
}

}  // namespace
