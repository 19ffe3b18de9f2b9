#include "distop/kernels/box.hpp"

#include <gtest/gtest.h>

#include "distop/core/error.hpp"
#include "distop/core/random.hpp"
#include "simd_cap.hpp"

using distop::Box;
using distop::Shape;
using distop::Tensor;

namespace {

// The row-major offset of index `i` of `box` in a tensor of shape `shape`, by plain index math.
std::int64_t offset_of(const Shape& shape, const Box& box, std::int64_t i) {
  const auto st = shape.strides();
  std::int64_t off = 0;
  for (int a = box.rank() - 1; a >= 0; --a) {
    off += (box.offset[a] + i % box.extent[a]) * st[a];
    i /= box.extent[a];
  }
  return off;
}

Tensor<double> iota(const Shape& s) {
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor<double>::from_vector(s, v);
}

std::vector<std::pair<Shape, Box>> cases() {
  std::vector<std::pair<Shape, Box>> c;
  c.push_back({Shape{10}, Box{{3}, {5}}});
  c.push_back({Shape{4, 6}, Box{{1, 0}, {2, 6}}});  // whole rows: one run
  c.push_back({Shape{4, 6}, Box{{1, 2}, {3, 3}}});  // strided rows
  c.push_back({Shape{3, 4, 5}, Box{{0, 1, 0}, {3, 2, 5}}});
  c.push_back({Shape{3, 4, 5}, Box{{1, 1, 1}, {2, 3, 3}}});
  c.push_back({Shape{2, 3, 4, 5}, Box{{1, 0, 2, 1}, {1, 3, 2, 4}}});
  c.push_back({Shape{2, 3, 4, 5}, Box{{0, 0, 0, 0}, {2, 3, 4, 5}}});  // everything
  c.push_back({Shape{2, 3}, Box{{1, 1}, {0, 2}}});                    // empty
  return c;
}

}  // namespace

TEST(Box, PackMatchesIndexMath) {
  for (const auto& [shape, box] : cases()) {
    auto t = iota(shape);
    // The flat buffers are tensors too: the kernels read and write distop's memory space.
    Tensor<double> buffer(Shape{box.numel()});
    buffer.fill(-1);
    distop::kernels::pack(t, box, buffer.data());
    const auto out = buffer.to_vector();
    for (std::int64_t i = 0; i < box.numel(); ++i)
      ASSERT_EQ(out[i], static_cast<double>(offset_of(shape, box, i))) << shape.str() << box.str();
  }
}

TEST(Box, UnpackOverwritesOrAccumulatesOnlyTheBox) {
  for (const auto& [shape, box] : cases()) {
    std::vector<double> in(static_cast<std::size_t>(box.numel()));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = 1000.0 + static_cast<double>(i);
    const auto buffer = Tensor<double>::from_vector(Shape{box.numel()}, in);
    auto t = iota(shape);
    distop::kernels::unpack(buffer.data(), box, t, false);
    auto u = iota(shape);
    distop::kernels::unpack(buffer.data(), box, u, true);
    auto tv = t.to_vector(), uv = u.to_vector();
    std::vector<int> inside(tv.size(), -1);
    for (std::int64_t i = 0; i < box.numel(); ++i)
      inside[offset_of(shape, box, i)] = static_cast<int>(i);
    for (std::size_t k = 0; k < tv.size(); ++k) {
      if (inside[k] < 0) {
        ASSERT_EQ(tv[k], static_cast<double>(k));
        ASSERT_EQ(uv[k], static_cast<double>(k));
      } else {
        ASSERT_EQ(tv[k], in[inside[k]]);
        ASSERT_EQ(uv[k], static_cast<double>(k) + in[inside[k]]);
      }
    }
  }
}

TEST(Box, CopyBoxAndFillBox) {
  auto a = iota(Shape{4, 5});
  Tensor<double> b(Shape{3, 3});
  distop::kernels::copy_box(a, Box{{1, 2}, {2, 3}}, b, Box{{1, 0}, {2, 3}});
  EXPECT_EQ(b.to_vector(), (std::vector<double>{0, 0, 0, 7, 8, 9, 12, 13, 14}));
  distop::kernels::fill_box(b, Box{{0, 1}, {3, 1}}, -1.0);
  EXPECT_EQ(b.to_vector(), (std::vector<double>{0, -1, 0, 7, -1, 9, 12, -1, 14}));
}

TEST(Box, IntersectAndRelative) {
  Box a{{0, 2}, {4, 4}}, b{{2, 0}, {4, 3}};
  EXPECT_EQ(a.intersect(b), (Box{{2, 2}, {2, 1}}));
  EXPECT_TRUE(a.intersect(Box{{5, 0}, {1, 9}}).empty());
  EXPECT_EQ(a.relative_to({0, 2}), (Box{{0, 0}, {4, 4}}));
  EXPECT_EQ(distop::whole(Shape{2, 3}), (Box{{0, 0}, {2, 3}}));
}

TEST(Box, BoxesOutsideTheTensorAreErrors) {
  auto t = iota(Shape{3, 3});
  double out[9];
  EXPECT_THROW(distop::kernels::pack(t, Box{{2, 0}, {2, 3}}, out), distop::Error);
  EXPECT_THROW(distop::kernels::pack(t, Box{{0}, {3}}, out), distop::Error);
  EXPECT_THROW(distop::kernels::unpack(out, Box{{-1, 0}, {1, 1}}, t), distop::Error);
}

namespace {

// pack, unpack, copy_box and their accumulating forms on a box of runs of `run` entries (the
// last axis, cut at both ends, `pad` entries left over) against index math, nothing outside the
// box touched.
template <class T>
void expect_box_kernels_match_index_math(std::int64_t run, std::int64_t pad) {
  const Shape shape{3, 4, run + pad};
  const Box box{{1, 1, 2}, {2, 3, run}};
  const std::int64_t n = box.numel();
  std::vector<T> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<T>(k % 1000);
  const auto t = Tensor<T>::from_vector(shape, values);
  std::vector<T> in(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<T>(2000 + i % 1000);
  std::vector<std::int64_t> inside(values.size(), -1);
  for (std::int64_t i = 0; i < n; ++i)
    inside[static_cast<std::size_t>(offset_of(shape, box, i))] = i;

  Tensor<T> packed_buffer(Shape{n});
  packed_buffer.fill(T(-1));
  distop::kernels::pack(t, box, packed_buffer.data());
  const std::vector<T> packed = packed_buffer.to_vector();
  const auto in_buffer = Tensor<T>::from_vector(Shape{n}, in);
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(packed[static_cast<std::size_t>(i)],
              values[static_cast<std::size_t>(offset_of(shape, box, i))])
        << "pack, run " << run << ", entry " << i;

  for (bool accumulate : {false, true}) {
    // unpack from `in`, and copy_box from a tensor holding `in` in the same box.
    auto u = Tensor<T>::from_vector(shape, values);
    distop::kernels::unpack(in_buffer.data(), box, u, accumulate);
    auto source = Tensor<T>::from_vector(shape, values);
    distop::kernels::unpack(in_buffer.data(), box, source, false);
    auto c = Tensor<T>::from_vector(shape, values);
    distop::kernels::copy_box(source, box, c, box, accumulate);
    for (const auto& [what, result] :
         {std::pair{"unpack", u.to_vector()}, {"copy_box", c.to_vector()}})
      for (std::size_t k = 0; k < values.size(); ++k) {
        const std::int64_t i = inside[k];
        const T expected =
            i < 0 ? values[k] : (accumulate ? values[k] : T(0)) + in[static_cast<std::size_t>(i)];
        ASSERT_EQ(result[k], expected)
            << what << (accumulate ? " += " : " = ") << ", run " << run << ", offset " << k;
      }
  }
}

}  // namespace

TEST(Box, EveryRunLengthUnderEveryVectorForm) {
  // Runs of 1 to 1100 entries: below, at and above a vector (64 bytes), with and without a partial
  // last vector, on both sides of the lengths from which copies go to memcpy (1 KiB, 4 KiB), the
  // runs close together and a page or more apart; under the widest vectors this CPU has, AVX2, and
  // none.
  for (int cap : {0, 32, 16}) {
    const distop::test::SimdCapScope scope(cap);
    for (std::int64_t run : {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 100, 255, 256, 257, 300, 1100}) {
      for (std::int64_t pad : {5, 1029}) {
        expect_box_kernels_match_index_math<float>(run, pad);
        expect_box_kernels_match_index_math<double>(run, pad);
      }
    }
  }
}

TEST(Box, PackAndUnpackAtEveryPlacementOfTheBufferInAPage) {
  // The vector copies run from the end of a run where the buffer lies a little ahead of the
  // tensor, modulo a page, and from the start elsewhere: packed buffers at every 4-byte offset of
  // a page from the tensor take both, for runs of a partial vector, of several vectors with a
  // partial last one, and of more than a kilobyte.
  const Shape shape{6, 300};
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
  const auto t = Tensor<float>::from_vector(shape, values);
  for (int cap : {0, 32}) {
    const distop::test::SimdCapScope scope(cap);
    for (std::int64_t run : {12, 100, 257}) {
      const Box box{{0, 3}, {6, run}};
      const std::int64_t n = box.numel();
      Tensor<float> buffer(Shape{n + 1024});
      for (std::int64_t at = 0; at < 1024; ++at) {
        buffer.fill(-1.0f);
        distop::kernels::pack(t, box, buffer.data() + at);
        auto u = Tensor<float>::from_vector(shape, std::vector<float>(values.size(), 0.0f));
        distop::kernels::unpack(buffer.data() + at, box, u);
        const auto packed = buffer.to_vector();
        const auto unpacked = u.to_vector();
        for (std::int64_t i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(offset_of(shape, box, i));
          ASSERT_EQ(packed[static_cast<std::size_t>(at + i)], values[k])
              << "pack, run " << run << ", buffer at +" << at << ", entry " << i;
          ASSERT_EQ(unpacked[k], values[k])
              << "unpack, run " << run << ", buffer at +" << at << ", entry " << i;
        }
        ASSERT_EQ(packed[static_cast<std::size_t>(at + n)], -1.0f) << "pack wrote past the box";
        if (at > 0) {
          ASSERT_EQ(packed[static_cast<std::size_t>(at - 1)], -1.0f) << "pack wrote before the box";
        }
      }
    }
  }
}
