#include "distop/kernels/elementwise.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
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
  kernels::relu_backward(x, dy, T(0), dx);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(y.to_vector()[i], xs[i] > 0 ? xs[i] : T(0));
    EXPECT_EQ(dx.to_vector()[i], xs[i] > 0 ? dys[i] : T(0));
  }

  kernels::sigmoid(x, y);
  kernels::sigmoid_backward(y, dy, T(0), dx);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-kInputs[i]));
    EXPECT_NEAR(y.to_vector()[i], s, tol);
    EXPECT_NEAR(dx.to_vector()[i], dys[i] * s * (1 - s), 4 * tol);
  }

  kernels::tanh(x, y);
  kernels::tanh_backward(y, dy, T(0), dx);
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

// The derivative kernels, each against its formula (in double), under make_function's convention:
// beta 0 overwrites dx without reading it (NaN there), beta != 0 adds to beta dx, and dx may be dy.
TYPED_TEST(ElementwiseTest, EveryBackwardKernelAccumulatesAsMakeFunctionDoes) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  using Backward = std::function<void(const Tensor<T>&, const Tensor<T>&, T, Tensor<T>&)>;
  using Forward = std::function<void(const Tensor<T>&, Tensor<T>&)>;
  struct Case {
    const char* name;
    Forward forward;
    Backward backward;
    bool from_output;
    double (*derivative)(double x);
    double first;  // inputs first, first + 0.25, ...
  };
  const T lo = T(-0.5), hi = T(0.75);
  const std::vector<Case> cases{
      {"relu", kernels::relu<T>, kernels::relu_backward<T>, false,
       [](double x) { return x > 0 ? 1.0 : 0.0; }, -1.5},
      {"sigmoid", kernels::sigmoid<T>, kernels::sigmoid_backward<T>, true,
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 - s);
       },
       -1.5},
      {"tanh", kernels::tanh<T>, kernels::tanh_backward<T>, true,
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, -1.5},
      {"exp", kernels::exp<T>, kernels::exp_backward<T>, true, [](double x) { return std::exp(x); },
       -1.5},
      {"log", kernels::log<T>, kernels::log_backward<T>, false, [](double x) { return 1 / x; },
       0.25},
      {"sqrt", kernels::sqrt<T>, kernels::sqrt_backward<T>, true,
       [](double x) { return 0.5 / std::sqrt(x); }, 0.25},
      {"rsqrt", kernels::rsqrt<T>, kernels::rsqrt_backward<T>, true,
       [](double x) { return -0.5 / (x * std::sqrt(x)); }, 0.25},
      {"logsigmoid", kernels::logsigmoid<T>, kernels::logsigmoid_backward<T>, false,
       [](double x) { return 1 / (1 + std::exp(x)); }, -1.5},
      {"clamp", [&](const Tensor<T>& x, Tensor<T>& y) { kernels::clamp(x, lo, hi, y); },
       [&](const Tensor<T>& x, const Tensor<T>& dy, T beta, Tensor<T>& dx) {
         kernels::clamp_backward(x, lo, hi, dy, beta, dx);
       },
       false, [](double x) { return -0.5 <= x && x <= 0.75 ? 1.0 : 0.0; }, -1.5},
  };
  const std::int64_t n = 13;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<T> xs, dys, dx0;
    for (std::int64_t i = 0; i < n; ++i) {
      xs.push_back(T(c.first + 0.25 * static_cast<double>(i)));
      dys.push_back(T(1) + T(0.5) * T(i % 5) - T(i % 2) * T(3));
      dx0.push_back(T(i % 7) - T(3));
    }
    const auto x = Tensor<T>::from_vector(Shape{n}, xs);
    const auto dy = Tensor<T>::from_vector(Shape{n}, dys);
    Tensor<T> y(Shape{n});
    c.forward(x, y);
    const Tensor<T>& saved = c.from_output ? y : x;
    std::vector<double> want;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      want.push_back(static_cast<double>(dys[u]) * c.derivative(static_cast<double>(xs[u])));
    }
    Tensor<T> dx(Shape{n});
    dx.fill(std::numeric_limits<T>::quiet_NaN());
    c.backward(saved, dy, T(0), dx);
    auto got = dx.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "beta 0, " << i;
    dx = Tensor<T>::from_vector(Shape{n}, dx0);
    c.backward(saved, dy, T(0.5), dx);
    got = dx.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double w = 0.5 * static_cast<double>(dx0[i]) + want[i];
      ASSERT_NEAR(got[i], w, tol * std::max(1.0, std::abs(w))) << "beta 0.5, " << i;
    }
    auto in_place = dy.clone();  // dx aliasing dy
    c.backward(saved, in_place, T(0), in_place);
    got = in_place.to_vector();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "in place, " << i;
  }
}

TYPED_TEST(ElementwiseTest, RsqrtIsOneOverTheSquareRoot) {
  using T = TypeParam;
  auto x = Tensor<T>::from_vector(Shape{4}, {0.25, 1, 4, 16});
  Tensor<T> y(Shape{4});
  kernels::rsqrt(x, y);
  EXPECT_EQ(y.to_vector(), (std::vector<T>{2, 1, 0.5, 0.25}));
}

// The entry of b (of shape bs, broadcast against as by torch's rules) that entry i of a meets.
std::int64_t broadcast_entry(const Shape& as, const Shape& bs, std::int64_t i) {
  std::int64_t j = 0, stride = 1;
  for (int d = as.rank() - 1, e = bs.rank() - 1; e >= 0; --d, --e) {
    const std::int64_t index = (i / as.strides()[d]) % as[d];
    if (bs[e] != 1) j += index * stride;
    stride *= bs[e];
  }
  return j;
}

// Pairs of shapes that broadcast: b the same shape, a bias row, a row of [1, n], a column, a
// scalar, a middle axis, several alternations (beyond the three merged axes of the strided loops),
// fewer leading axes, extents of 1 in both, and empty tensors.
std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  return {{Shape{2, 3}, Shape{2, 3}},
          {Shape{5, 3}, Shape{3}},
          {Shape{5, 3}, Shape{1, 3}},
          {Shape{5, 3}, Shape{5, 1}},
          {Shape{5, 3}, Shape{1}},
          {Shape{5, 3}, Shape{1, 1}},
          {Shape{2, 3, 4}, Shape{3, 1}},
          {Shape{2, 3, 4}, Shape{2, 1, 4}},
          {Shape{2, 3, 4}, Shape{4}},
          {Shape{2, 3, 4, 5}, Shape{2, 1, 4, 1}},
          {Shape{3, 2, 3, 2, 3}, Shape{2, 1, 2, 1}},
          {Shape{2, 1, 4}, Shape{1, 4}},
          {Shape{2, 1, 4}, Shape{2, 1, 1}},
          {Shape{1, 1}, Shape{1}},
          {Shape{0, 3}, Shape{3}},
          {Shape{3, 0}, Shape{3, 1}},
          {Shape{4, 6}, Shape{6}}};
}

template <class T>
std::vector<T> ramp(std::int64_t n, double scale, double shift) {
  std::vector<T> v;
  for (std::int64_t i = 0; i < n; ++i)
    v.push_back(T(shift + scale * static_cast<double>((i * 7) % 11)));
  return v;
}

TYPED_TEST(ElementwiseTest, BroadcastArithmeticMatchesTheLoops) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
  for (const auto& [as, bs] : broadcast_pairs()) {
    SCOPED_TRACE(as.str() + " with " + bs.str());
    const auto av = ramp<T>(as.numel(), 0.5, -2);
    const auto bv = ramp<T>(bs.numel(), 0.25, 0.5);  // positive: a divisor
    const auto cv = ramp<T>(as.numel(), -1, 3);
    const auto a = Tensor<T>::from_vector(as, av);
    const auto b = Tensor<T>::from_vector(bs, bv);
    Tensor<T> add(as), mul0(as), div0(as);
    mul0.fill(std::numeric_limits<T>::quiet_NaN());  // beta 0 does not read c
    div0.fill(std::numeric_limits<T>::quiet_NaN());
    auto mul1 = Tensor<T>::from_vector(as, cv);
    auto div1 = Tensor<T>::from_vector(as, cv);
    kernels::add(a, T(-2), b, add);
    kernels::mul(T(1.5), a, b, T(0), mul0);
    kernels::mul(T(1.5), a, b, T(0.5), mul1);
    kernels::div(T(-1), a, b, T(0), div0);
    kernels::div(T(-1), a, b, T(2), div1);
    const auto got_add = add.to_vector(), got_mul0 = mul0.to_vector(), got_mul1 = mul1.to_vector();
    const auto got_div0 = div0.to_vector(), got_div1 = div1.to_vector();
    for (std::int64_t i = 0; i < as.numel(); ++i) {
      const auto u = static_cast<std::size_t>(i);
      const double x = av[u], z = bv[static_cast<std::size_t>(broadcast_entry(as, bs, i))];
      const double c = cv[u];
      auto near = [&](double got, double want, const char* what) {
        EXPECT_NEAR(got, want, tol * std::max(1.0, std::abs(want))) << what << " entry " << i;
      };
      near(got_add[u], x - 2 * z, "add");
      near(got_mul0[u], 1.5 * x * z, "mul, beta 0");
      near(got_mul1[u], 1.5 * x * z + 0.5 * c, "mul, beta 0.5");
      near(got_div0[u], -x / z, "div, beta 0");
      near(got_div1[u], -x / z + 2 * c, "div, beta 2");
    }
  }
  // In place: c aliasing a.
  auto a = Tensor<T>::from_vector(Shape{2, 2}, {1, 2, 3, 4});
  kernels::add(a, T(1), Tensor<T>::from_vector(Shape{2}, {10, 20}), a);
  EXPECT_EQ(a.to_vector(), (std::vector<T>{11, 22, 13, 24}));
}

TYPED_TEST(ElementwiseTest, SumToIsTheAdjointOfBroadcasting) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (int cap : {0, 16}) {  // the rows' host fast path (where it applies) and the portable form
    const distop::test::SimdCapScope scope(cap);
    for (const auto& [as, bs] : broadcast_pairs()) {
      SCOPED_TRACE(as.str() + " to " + bs.str() + ", cap " + std::to_string(cap));
      const auto dyv = ramp<T>(as.numel(), 0.5, -2);
      const auto wv = ramp<T>(as.numel(), -0.25, 1);
      const auto dbv = ramp<T>(bs.numel(), 1, -4);
      const auto dy = Tensor<T>::from_vector(as, dyv);
      const auto w = Tensor<T>::from_vector(as, wv);
      std::vector<double> sums(static_cast<std::size_t>(bs.numel()), 0.0);
      std::vector<double> weighted = sums;
      for (std::int64_t i = 0; i < as.numel(); ++i) {
        const auto j = static_cast<std::size_t>(broadcast_entry(as, bs, i));
        sums[j] += dyv[static_cast<std::size_t>(i)];
        weighted[j] += dyv[static_cast<std::size_t>(i)] * wv[static_cast<std::size_t>(i)];
      }
      for (T alpha : {T(1), T(-1)}) {
        Tensor<T> db0(bs);
        db0.fill(std::numeric_limits<T>::quiet_NaN());
        kernels::sum_to(dy, alpha, T(0), db0);
        auto db1 = Tensor<T>::from_vector(bs, dbv);
        kernels::sum_to(dy, alpha, T(1), db1, &w);
        const auto got0 = db0.to_vector(), got1 = db1.to_vector();
        for (std::size_t j = 0; j < sums.size(); ++j) {
          const double want0 = static_cast<double>(alpha) * sums[j];
          const double want1 = static_cast<double>(alpha) * weighted[j] + dbv[j];
          EXPECT_NEAR(got0[j], want0, tol * std::max(1.0, std::abs(want0))) << "entry " << j;
          EXPECT_NEAR(got1[j], want1, tol * std::max(1.0, std::abs(want1))) << "entry " << j;
        }
      }
    }
  }
}

TEST(Elementwise, ShapesThatDoNotBroadcastAreErrors) {
  Tensor<double> a(Shape{4, 3}), c(Shape{4, 3});
  for (const Shape& bs : {Shape{4}, Shape{2, 3}, Shape{1, 4, 3}, Shape{4, 3, 1}, Shape{3, 3}}) {
    SCOPED_TRACE(bs.str());
    Tensor<double> b(bs);
    EXPECT_THROW(kernels::add(a, 1.0, b, c), distop::Error);
    EXPECT_THROW(kernels::mul(1.0, a, b, 0.0, c), distop::Error);
    EXPECT_THROW(kernels::div(1.0, a, b, 0.0, c), distop::Error);
    EXPECT_THROW(kernels::sum_to(a, 1.0, 0.0, b), distop::Error);
  }
  Tensor<double> b(Shape{3}), short_c(Shape{3, 3});
  EXPECT_THROW(kernels::add(a, 1.0, b, short_c), distop::Error);           // the output is not a's
  EXPECT_THROW(kernels::sum_to(a, 1.0, 0.0, b, &short_c), distop::Error);  // nor the weight
  EXPECT_THROW(kernels::add_scalar(a, 1.0, short_c), distop::Error);
  EXPECT_THROW(kernels::scaled_add(1.0, a, 0.0, short_c), distop::Error);
}

TEST(Elementwise, ShapeMismatchesAreErrors) {
  Tensor<double> a(Shape{2, 3}), b(Shape{5}), c(Shape{3});
  EXPECT_THROW(kernels::relu(a, b), distop::Error);
  EXPECT_THROW(kernels::tanh_backward(a, a, 0.0, b), distop::Error);
  EXPECT_THROW(kernels::add_row_vector(a, b), distop::Error);
  EXPECT_NO_THROW(kernels::add_row_vector(a, c));
  EXPECT_THROW(kernels::fill_rows(a, b), distop::Error);
  EXPECT_THROW(kernels::sum_rows(a, 0.0, b), distop::Error);
  EXPECT_THROW(kernels::add_row_vector(c, c), distop::Error);  // y must be 2-D
}

}  // namespace
