#include "distop/kernels/elementwise.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "simd_cap.hpp"

namespace {

using distop::Shape;
using distop::Tensor;
namespace kernels = distop::kernels;

template <class T>
class ElementwiseTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ElementwiseTest, Scalars);

const std::vector<double> kInputs = {-3.0, -0.5, -1e-3, 0.25, 1.0, 4.0};

TYPED_TEST(ElementwiseTest, ActivationsAndDerivativesMatchTheirFormulas) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
  std::vector<T> xs(kInputs.begin(), kInputs.end());
  std::vector<T> dys = {1, -2, 3, 0.5, -1, 2};
  auto x = Tensor<T>::from_vector(Shape{2, 3}, xs);
  auto dy = Tensor<T>::from_vector(Shape{2, 3}, dys);
  Tensor<T> y(Shape{2, 3}), dx(Shape{2, 3});

  kernels::relu(x, y);
  kernels::relu_backward(x, dy, dx);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(y.to_vector()[i], xs[i] > 0 ? xs[i] : T(0));
    EXPECT_EQ(dx.to_vector()[i], xs[i] > 0 ? dys[i] : T(0));
  }

  kernels::sigmoid(x, y);
  kernels::sigmoid_backward(y, dy, dx);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-kInputs[i]));
    EXPECT_NEAR(y.to_vector()[i], s, tol);
    EXPECT_NEAR(dx.to_vector()[i], dys[i] * s * (1 - s), 4 * tol);
  }

  kernels::tanh(x, y);
  kernels::tanh_backward(y, dy, dx);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(kInputs[i]);
    EXPECT_NEAR(y.to_vector()[i], t, tol);
    EXPECT_NEAR(dx.to_vector()[i], dys[i] * (1 - t * t), 8 * tol);
  }
}

TYPED_TEST(ElementwiseTest, SigmoidSaturatesWithoutOverflow) {
  using T = TypeParam;
  auto x = Tensor<T>::from_vector(Shape{4}, {-1000, -100, 100, 1000});
  Tensor<T> y(Shape{4});
  kernels::sigmoid(x, y);
  const auto v = y.to_vector();
  for (T e : v) EXPECT_TRUE(std::isfinite(e));
  EXPECT_EQ(v[0], T(0));
  EXPECT_EQ(v[3], T(1));
}

TYPED_TEST(ElementwiseTest, InPlaceIsAllowed) {
  using T = TypeParam;
  auto x = Tensor<T>::from_vector(Shape{3}, {-1, 0, 2});
  kernels::relu(x, x);
  EXPECT_EQ(x.to_vector(), (std::vector<T>{0, 0, 2}));
}

TYPED_TEST(ElementwiseTest, AddRowVectorAndSumRows) {
  using T = TypeParam;
  auto y = Tensor<T>::from_vector(Shape{3, 2}, {1, 2, 3, 4, 5, 6});
  auto b = Tensor<T>::from_vector(Shape{2}, {10, -10});
  kernels::add_row_vector(y, b);
  EXPECT_EQ(y.to_vector(), (std::vector<T>{11, -8, 13, -6, 15, -4}));

  Tensor<T> db(Shape{2});
  db.fill(std::numeric_limits<T>::quiet_NaN());  // not read when beta is 0
  kernels::sum_rows(y, T(0), db);
  EXPECT_EQ(db.to_vector(), (std::vector<T>{39, -18}));
  kernels::sum_rows(y, T(0.5), db);
  EXPECT_EQ(db.to_vector(), (std::vector<T>{58.5, -27}));
}

TYPED_TEST(ElementwiseTest, AddRowVectorMatchesItsDefinitionForEveryRowLength) {
  using T = TypeParam;
  // Row lengths below, at and above a vector (16 floats, 8 doubles), some dividing it and some
  // not, so that the repeating pattern of the vector form spans 1 to 16 vectors; row counts that
  // end on and off a whole period. Every form: the widest vectors, AVX2, and none.
  for (int cap : {0, 32, 16}) {
    const distop::test::SimdCapScope scope(cap);
    for (std::int64_t n : {1, 2, 3, 5, 7, 8, 9, 10, 15, 16, 17, 33}) {
      for (std::int64_t rows : {0, 1, 2, 3, 7, 16, 17, 64, 65}) {
        std::vector<T> yv, bv;
        for (std::int64_t t = 0; t < rows * n; ++t) yv.push_back(T(t % 97) - T(40));
        for (std::int64_t j = 0; j < n; ++j) bv.push_back(T(0.5) * T(j) + T(1));
        auto y = Tensor<T>::from_vector(Shape{rows, n}, yv);
        kernels::add_row_vector(y, Tensor<T>::from_vector(Shape{n}, bv));
        const auto v = y.to_vector();
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            const auto t = static_cast<std::size_t>(i * n + j);
            ASSERT_EQ(v[t], yv[t] + bv[static_cast<std::size_t>(j)])
                << "cap " << cap << ", " << rows << "x" << n << " at (" << i << ", " << j << ")";
          }
      }
    }
  }
}

TYPED_TEST(ElementwiseTest, SumRowsMatchesItsDefinitionForEveryRowLength) {
  using T = TypeParam;
  // As above; entries are multiples of 1/4 whose sums are exact in any order, so every form gives
  // the same bits. beta = 0 must not read db (NaN there), beta != 0 scales it.
  for (int cap : {0, 32, 16}) {
    const distop::test::SimdCapScope scope(cap);
    for (std::int64_t n : {1, 2, 3, 5, 7, 8, 9, 10, 15, 16, 17, 33}) {
      for (std::int64_t rows : {0, 1, 2, 3, 7, 16, 17, 64, 65}) {
        std::vector<T> dyv;
        for (std::int64_t t = 0; t < rows * n; ++t) dyv.push_back(T(t % 89) * T(0.25) - T(9));
        const auto dy = Tensor<T>::from_vector(Shape{rows, n}, dyv);
        Tensor<T> db(Shape{n});
        db.fill(std::numeric_limits<T>::quiet_NaN());
        kernels::sum_rows(dy, T(0), db);
        const auto first = db.to_vector();
        kernels::sum_rows(dy, T(-2), db);
        const auto second = db.to_vector();
        for (std::int64_t j = 0; j < n; ++j) {
          double expected = 0;
          for (std::int64_t i = 0; i < rows; ++i)
            expected += static_cast<double>(dyv[static_cast<std::size_t>(i * n + j)]);
          const auto u = static_cast<std::size_t>(j);
          ASSERT_EQ(first[u], T(expected))
              << "cap " << cap << ", " << rows << "x" << n << ", " << j;
          ASSERT_EQ(second[u], T(-expected))
              << "cap " << cap << ", " << rows << "x" << n << ", " << j;
        }
      }
    }
  }
}

TYPED_TEST(ElementwiseTest, FillRowsCopiesTheVectorIntoEveryRow) {
  using T = TypeParam;
  // Row counts around the doubling copies' boundaries, and a single column.
  for (std::int64_t rows : {1, 2, 3, 5, 8, 13}) {
    for (std::int64_t n : {1, 3}) {
      Tensor<T> y(Shape{rows, n});
      y.fill(T(-7));
      std::vector<T> bv;
      for (std::int64_t j = 0; j < n; ++j) bv.push_back(T(j + 1));
      kernels::fill_rows(y, Tensor<T>::from_vector(Shape{n}, bv));
      const auto v = y.to_vector();
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < n; ++j)
          EXPECT_EQ(v[static_cast<std::size_t>(i * n + j)], T(j + 1)) << rows << "x" << n;
    }
  }
  Tensor<T> none(Shape{0, 3});
  EXPECT_NO_THROW(kernels::fill_rows(none, Tensor<T>(Shape{3})));
}

TEST(Elementwise, ShapeMismatchesAreErrors) {
  Tensor<double> a(Shape{2, 3}), b(Shape{5}), c(Shape{3});
  EXPECT_THROW(kernels::relu(a, b), distop::Error);
  EXPECT_THROW(kernels::tanh_backward(a, a, b), distop::Error);
  EXPECT_THROW(kernels::add_row_vector(a, b), distop::Error);
  EXPECT_NO_THROW(kernels::add_row_vector(a, c));
  EXPECT_THROW(kernels::fill_rows(a, b), distop::Error);
  EXPECT_THROW(kernels::sum_rows(a, 0.0, b), distop::Error);
  EXPECT_THROW(kernels::add_row_vector(c, c), distop::Error);  // y must be 2-D
}

}  // namespace
