// kernels::BoxPlan: pack, unpack, fill and copy through a plan (its host form and the portable form
// a GPU runs) give the same entries as the Box-taking kernels, and allocate nothing per call.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/kernels/box.hpp"
#include "distop/kernels/simd.hpp"

using distop::Box;
using distop::Shape;
using distop::Tensor;
namespace kernels = distop::kernels;

namespace {

Tensor<double> iota(const Shape& s, double start = 0) {
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return Tensor<double>::from_vector(s, v);
}

std::vector<std::pair<Shape, Box>> cases() {
  return {{Shape{10}, Box{{3}, {5}}},
          {Shape{4, 6}, Box{{1, 0}, {2, 6}}},  // whole rows: one run
          {Shape{4, 6}, Box{{1, 2}, {3, 3}}},  // strided rows
          {Shape{3, 4, 5}, Box{{1, 1, 1}, {2, 3, 3}}},
          {Shape{2, 3, 4, 5}, Box{{1, 0, 2, 1}, {1, 3, 2, 4}}},
          {Shape{2, 3, 4, 5}, Box{{0, 0, 0, 0}, {2, 3, 4, 5}}},  // everything
          {Shape{4, 40, 40}, Box{{0, 3, 5}, {4, 30, 33}}},       // runs long enough for SIMD
          {Shape{2, 3}, Box{{1, 1}, {0, 2}}}};                   // empty
}

// The forms under test: the dispatching one (host copies here) and the portable one.
struct Forms {
  const char* name;
  void (*pack)(const Tensor<double>&, const kernels::BoxPlan&, double*);
  void (*unpack)(const double*, const kernels::BoxPlan&, Tensor<double>&, bool);
  void (*fill)(Tensor<double>&, const kernels::BoxPlan&, double);
  void (*copy)(const Tensor<double>&, const kernels::BoxPlan&, Tensor<double>&,
               const kernels::BoxPlan&, bool);
};

std::vector<Forms> forms() {
  return {{"dispatching", &kernels::pack<double>, &kernels::unpack<double>,
           &kernels::fill_box<double>, &kernels::copy_box<double>},
          {"portable", &kernels::portable::pack<double>, &kernels::portable::unpack<double>,
           &kernels::portable::fill_box<double>, &kernels::portable::copy_box<double>}};
}

// Counts Kokkos allocations and deep copies while it lives (Kokkos' profiling hooks).
struct KokkosEventCounter {
  static inline std::int64_t allocations = 0;
  static inline std::int64_t deep_copies = 0;
  KokkosEventCounter() {
    allocations = 0;
    deep_copies = 0;
    Kokkos::Tools::Experimental::set_allocate_data_callback(
        [](Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) { ++allocations; });
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(
        [](Kokkos::Tools::SpaceHandle, const char*, const void*, Kokkos::Tools::SpaceHandle,
           const char*, const void*, std::uint64_t) { ++deep_copies; });
  }
  ~KokkosEventCounter() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
  }
};

}  // namespace

TEST(BoxPlan, SameEntriesAsTheBoxKernels) {
  for (const auto& f : forms()) {
    for (const auto& [shape, box] : cases()) {
      SCOPED_TRACE(std::string(f.name) + " " + shape.str() + " " + box.str());
      const kernels::BoxPlan plan(shape, box);
      EXPECT_EQ(plan.numel(), box.numel());
      EXPECT_EQ(plan.box(), box);
      const auto src = iota(shape, 1);
      const auto n = std::max<std::int64_t>(box.numel(), 1);
      Tensor<double> want(Shape{n}), got(Shape{n});
      want.fill(-1);
      got.fill(-1);
      kernels::pack(src, box, want.data());
      f.pack(src, plan, got.data());
      EXPECT_EQ(got.to_vector(), want.to_vector());

      const auto packed = iota(Shape{n}, 1000);
      for (const bool accumulate : {false, true}) {
        auto a = iota(shape, 1);
        auto b = iota(shape, 1);
        kernels::unpack(packed.data(), box, a, accumulate);
        f.unpack(packed.data(), plan, b, accumulate);
        EXPECT_EQ(b.to_vector(), a.to_vector()) << "accumulate " << accumulate;
      }
      auto a = iota(shape, 1);
      auto b = iota(shape, 1);
      kernels::fill_box(a, box, 7.0);
      f.fill(b, plan, 7.0);
      EXPECT_EQ(b.to_vector(), a.to_vector());

      // The same box, shifted, in a tensor of another shape: runs of other lengths.
      Shape other_shape = shape;
      Box other = box;
      if (shape.rank() > 0) {
        other_shape[shape.rank() - 1] += 3;
        other.offset[static_cast<std::size_t>(box.rank() - 1)] += 2;
      }
      const kernels::BoxPlan other_plan(other_shape, other);
      for (const bool accumulate : {false, true}) {
        auto c = iota(other_shape, 1);
        auto d = iota(other_shape, 1);
        kernels::copy_box(src, box, c, other, accumulate);
        f.copy(src, plan, d, other_plan, accumulate);
        EXPECT_EQ(d.to_vector(), c.to_vector()) << "accumulate " << accumulate;
      }
    }
  }
}

TEST(BoxPlan, RepeatedCallsAllocateAndCopyNothing) {
  const Shape shape{4, 40, 40};
  const Box box{{0, 3, 5}, {4, 30, 33}};
  const Shape other_shape{4, 40, 43};
  const Box other{{0, 3, 7}, {4, 30, 33}};
  const auto src = iota(shape);
  auto dst = iota(shape);
  auto far = iota(other_shape);
  Tensor<double> buffer(Shape{box.numel()});
  {
    KokkosEventCounter counter;
    // The counter sees allocations: building a plan puts its run starts in a View.
    const kernels::BoxPlan probe(shape, box);
    ASSERT_GE(KokkosEventCounter::allocations, 1) << "the profiling hook saw no allocation";
  }
  const kernels::BoxPlan plan(shape, box);
  const kernels::BoxPlan other_plan(other_shape, other);
  KokkosEventCounter counter;
  for (const auto& f : forms()) {
    for (int i = 0; i < 20; ++i) {
      f.pack(src, plan, buffer.data());
      f.unpack(buffer.data(), plan, dst, i % 2 == 1);
      f.fill(dst, plan, 1.0);
      f.copy(src, plan, far, other_plan, i % 2 == 1);
    }
    EXPECT_EQ(KokkosEventCounter::allocations, 0) << f.name;
    EXPECT_EQ(KokkosEventCounter::deep_copies, 0) << f.name;
  }
}

TEST(BoxPlan, RefusesAnotherShapeOrOneTensor) {
  const kernels::BoxPlan plan(Shape{4, 6}, Box{{1, 2}, {3, 3}});
  auto t = iota(Shape{4, 7});
  Tensor<double> buffer(Shape{9});
  EXPECT_THROW(kernels::pack(t, plan, buffer.data()), distop::Error);
  EXPECT_THROW(kernels::portable::unpack(buffer.data(), plan, t), distop::Error);
  auto u = iota(Shape{4, 6});
  const kernels::BoxPlan left(Shape{4, 6}, Box{{0, 0}, {3, 3}});
  EXPECT_THROW(kernels::copy_box(u, left, u, plan), distop::Error);
  EXPECT_THROW(kernels::BoxPlan(Shape{4, 6}, Box{{2, 2}, {3, 3}}), distop::Error);
}

// The environment variable DISTOP_HOST_KERNELS=off switches the host fast paths off at run time
// (the ctest entry portable_kernels sets it): host_kernels_enabled() reports it, and the
// hand-vectorised kernels see no vector width.
TEST(HostKernels, EnvironmentSwitchIsReported) {
  const char* v = std::getenv("DISTOP_HOST_KERNELS");
  if (v != nullptr && std::string(v) == "off") {
    EXPECT_FALSE(kernels::host_kernels_enabled());
    EXPECT_EQ(kernels::host_simd_bytes(), 0);
  }
  if (!kernels::host_kernels_enabled()) {
    EXPECT_EQ(kernels::host_simd_bytes(), 0);
  }
}
