#include "distop/kernels/gemm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "distop/core/random.hpp"

namespace {

using distop::Shape;
using distop::Tensor;
using distop::kernels::Op;

template <class T>
Tensor<T> random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::vector<T> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<T>(2 * distop::random::uniform(seed, i) - 1);
  return Tensor<T>::from_vector(Shape{rows, cols}, v);
}

// op(x)[i, j] of a row-major matrix stored with `cols` columns.
template <class T>
double at(const std::vector<T>& x, std::int64_t cols, Op op, std::int64_t i, std::int64_t j) {
  return static_cast<double>(op == Op::N ? x[static_cast<std::size_t>(i * cols + j)]
                                         : x[static_cast<std::size_t>(j * cols + i)]);
}

template <class T>
class GemmTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, Scalars);

TYPED_TEST(GemmTest, MatchesNaiveTripleLoopForEveryTransposeAndOddShapes) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  const std::vector<std::vector<std::int64_t>> shapes = {{5, 7, 3}, {1, 1, 1},    {4, 1, 6},
                                                         {3, 8, 1}, {17, 13, 11}, {1, 9, 2}};
  std::uint64_t seed = 1;
  for (const auto& mnk : shapes) {
    const std::int64_t m = mnk[0], n = mnk[1], k = mnk[2];
    for (Op op_a : {Op::N, Op::T}) {
      for (Op op_b : {Op::N, Op::T}) {
        auto a = op_a == Op::N ? random_matrix<T>(m, k, seed++) : random_matrix<T>(k, m, seed++);
        auto b = op_b == Op::N ? random_matrix<T>(k, n, seed++) : random_matrix<T>(n, k, seed++);
        auto c = random_matrix<T>(m, n, seed++);
        const auto av = a.to_vector(), bv = b.to_vector(), c0 = c.to_vector();
        const T alpha = T(0.75), beta = T(-1.25);
        distop::kernels::gemm(op_a, op_b, alpha, a, b, beta, c);
        const auto cv = c.to_vector();
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (std::int64_t l = 0; l < k; ++l)
              s += at(av, a.extent(1), op_a, i, l) * at(bv, b.extent(1), op_b, l, j);
            const double expected = alpha * s + beta * static_cast<double>(c0[i * n + j]);
            EXPECT_NEAR(cv[i * n + j], expected, tol * (1 + static_cast<double>(k)))
                << "m=" << m << " n=" << n << " k=" << k << " op_a=" << (op_a == Op::T)
                << " op_b=" << (op_b == Op::T) << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

TYPED_TEST(GemmTest, BetaZeroIgnoresTheOldOutput) {
  using T = TypeParam;
  auto a = Tensor<T>::from_vector(Shape{2, 2}, {1, 2, 3, 4});
  auto b = Tensor<T>::from_vector(Shape{2, 1}, {1, -1});
  Tensor<T> c(Shape{2, 1});
  c.fill(std::numeric_limits<T>::quiet_NaN());
  distop::kernels::gemm(Op::N, Op::N, T(1), a, b, T(0), c);
  EXPECT_EQ(c.to_vector(), (std::vector<T>{-1, -1}));
}

TYPED_TEST(GemmTest, EmptyInnerDimensionScalesTheOutput) {
  using T = TypeParam;
  Tensor<T> a(Shape{2, 0}), b(Shape{0, 3});
  auto c = Tensor<T>::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  distop::kernels::gemm(Op::N, Op::N, T(1), a, b, T(2), c);
  EXPECT_EQ(c.to_vector(), (std::vector<T>{2, 4, 6, 8, 10, 12}));
}

TEST(Gemm, ShapeMismatchIsAnErrorNamingTheShapes) {
  Tensor<double> a(Shape{2, 3}), b(Shape{4, 5}), c(Shape{2, 5});
  try {
    distop::kernels::gemm(Op::N, Op::N, 1.0, a, b, 0.0, c);
    FAIL() << "expected an Error";
  } catch (const distop::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 5]"), std::string::npos) << what;
  }
  // The inner dimensions agree once b is transposed, but c has the wrong shape.
  Tensor<double> bt(Shape{5, 3});
  EXPECT_NO_THROW(distop::kernels::gemm(Op::N, Op::T, 1.0, a, bt, 0.0, c));
  Tensor<double> wrong_c(Shape{5, 2});
  try {
    distop::kernels::gemm(Op::N, Op::T, 1.0, a, bt, 0.0, wrong_c);
    FAIL() << "expected an Error";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 2]"), std::string::npos) << e.what();
  }
  Tensor<double> vec(Shape{3});
  EXPECT_THROW(distop::kernels::gemm(Op::N, Op::N, 1.0, a, vec, 0.0, c), distop::Error);
  Tensor<double> square(Shape{2, 2});
  EXPECT_THROW(distop::kernels::gemm(Op::N, Op::N, 1.0, square, square, 0.0, square),
               distop::Error);  // the output aliases an input
}

}  // namespace
