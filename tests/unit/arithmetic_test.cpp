// nn::add, sub, mul, div (same space and broadcast by torch's rules), adding a constant and scale
// (by a constant and by a scalar Var): values against naive loops, gradients against finite
// differences, float against double, bad operands.
#include "distop/nn/arithmetic.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/elementwise.hpp"
#include "distop/nn/reduction.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Error;
using distop::Shape;
using distop::Tape;
using distop::Var;
namespace nn = distop::nn;
namespace test = distop::test;
using test::local_space;
using test::random_tensor;

using Binary = Var<double> (*)(Tape&, const Var<double>&, const Var<double>&);

struct BinaryCase {
  const char* name;
  Binary op;
  double (*naive)(double, double);
};

std::vector<BinaryCase> binary_cases() {
  return {{"add", nn::add<double>, [](double a, double b) { return a + b; }},
          {"sub", nn::sub<double>, [](double a, double b) { return a - b; }},
          {"mul", nn::mul<double>, [](double a, double b) { return a * b; }},
          {"div", nn::div<double>, [](double a, double b) { return a / b; }}};
}

// The entry of b (of shape bs, broadcast against as by torch's rules) that entry i of a meets.
std::size_t broadcast_entry(const Shape& as, const Shape& bs, std::size_t i) {
  std::int64_t j = 0, stride = 1;
  const auto strides = as.strides();
  for (int d = as.rank() - 1, e = bs.rank() - 1; e >= 0; --d, --e) {
    const std::int64_t index = (static_cast<std::int64_t>(i) / strides[d]) % as[d];
    if (bs[e] != 1) j += index * stride;
    stride *= bs[e];
  }
  return static_cast<std::size_t>(j);
}

// a of shape `a_shape` against b of `b_shape`: the values entry by entry (b broadcast) and both
// gradients. b's entries lie in [0.5, 1.5), away from 0 for div.
void check_binary(const BinaryCase& c, const Shape& a_shape, const Shape& b_shape) {
  SCOPED_TRACE(std::string(c.name) + " " + a_shape.str() + " with " + b_shape.str());
  Var<double> a(random_tensor<double>(local_space(a_shape), 1), true);
  Var<double> b(random_tensor<double>(local_space(b_shape), 2, 0.5, 1.5), true);
  Tape tape;
  const auto y = c.op(tape, a, b).value().local().to_vector();
  const auto av = a.value().local().to_vector();
  const auto bv = b.value().local().to_vector();
  ASSERT_EQ(y.size(), av.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    EXPECT_DOUBLE_EQ(y[i], c.naive(av[i], bv[broadcast_entry(a_shape, b_shape, i)]))
        << "entry " << i;
  tape.clear();
  const auto r = random_tensor<double>(local_space(a_shape), 3);
  test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, c.op(t, a, b), r); },
                               {a, b});
}

TEST(Arithmetic, SameSpaceValuesAndGradients) {
  for (const auto& c : binary_cases()) {
    check_binary(c, Shape{3, 4}, Shape{3, 4});
    check_binary(c, Shape{2, 3, 2}, Shape{2, 3, 2});
  }
}

TEST(Arithmetic, BroadcastByTorchsRules) {
  for (const auto& c : binary_cases()) {
    check_binary(c, Shape{4, 3}, Shape{3});        // the trailing shape
    check_binary(c, Shape{4, 3}, Shape{1, 3});     // [1, ...]
    check_binary(c, Shape{3, 2, 5}, Shape{2, 5});  // 3-D rows
    check_binary(c, Shape{3, 2, 5}, Shape{1, 2, 5});
    check_binary(c, Shape{5}, Shape{1});                    // one scalar per entry
    check_binary(c, Shape{1, 4}, Shape{4});                 // one row
    check_binary(c, Shape{4, 3}, Shape{4, 1});              // a column: a mean taken with keepdim
    check_binary(c, Shape{3, 2, 5}, Shape{3, 1, 1});        // one value per sample
    check_binary(c, Shape{3, 2, 5}, Shape{2, 1});           // a middle axis
    check_binary(c, Shape{2, 3, 2, 3}, Shape{2, 1, 2, 1});  // alternating
    check_binary(c, Shape{3, 4}, Shape{1, 1});
  }
}

// The broadcast operand's gradient is the column sums: checked against the loop, not only against
// finite differences.
TEST(Arithmetic, BroadcastGradientIsTheSumOverRows) {
  Var<double> a(random_tensor<double>(local_space(Shape{5, 3}), 1), true);
  Var<double> b(random_tensor<double>(local_space(Shape{3}), 2), true);
  const auto r = random_tensor<double>(local_space(Shape{5, 3}), 3);
  Tape tape;
  auto l = test::weighted_sum(tape, nn::mul(tape, a, b), r);
  distop::backward(tape, l);
  const auto av = a.value().local().to_vector();
  const auto rv = r.local().to_vector();
  const auto db = b.grad().local().to_vector();
  for (std::size_t j = 0; j < 3; ++j) {
    double s = 0;
    for (std::size_t i = 0; i < 5; ++i) s += rv[i * 3 + j] * av[i * 3 + j];
    EXPECT_NEAR(db[j], s, 1e-14);
  }
}

TEST(Arithmetic, DivGradientsAreTheQuotientRule) {
  // a / b with b a column: da = dy / b, db = -sum over the row of dy a / b^2.
  Var<double> a(random_tensor<double>(local_space(Shape{3, 4}), 1), true);
  Var<double> b(random_tensor<double>(local_space(Shape{3, 1}), 2, 0.5, 1.5), true);
  const auto r = random_tensor<double>(local_space(Shape{3, 4}), 3);
  Tape tape;
  auto l = test::weighted_sum(tape, nn::div(tape, a, b), r);
  distop::backward(tape, l);
  const auto av = a.value().local().to_vector(), bv = b.value().local().to_vector();
  const auto rv = r.local().to_vector();
  const auto da = a.grad().local().to_vector(), db = b.grad().local().to_vector();
  for (std::size_t i = 0; i < 3; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_NEAR(da[i * 4 + j], rv[i * 4 + j] / bv[i], 1e-14);
      s -= rv[i * 4 + j] * av[i * 4 + j] / (bv[i] * bv[i]);
    }
    EXPECT_NEAR(db[i], s, 1e-13);
  }
}

TEST(Arithmetic, AddAConstant) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4}), 6), true);
  Tape tape;
  const auto y = nn::add(tape, x, 1e-5).value().local().to_vector();
  const auto xv = x.value().local().to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], xv[i] + 1e-5);
  tape.clear();
  const auto r = random_tensor<double>(x.space(), 7);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::add(t, nn::mul(t, x, x), -0.5), r); }, {x});
}

TEST(Arithmetic, AVarUsedAsBothOperands) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 3}), 4, 0.5, 1.5), true);
  const auto r = random_tensor<double>(x.space(), 5);
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, c.op(t, x, x), r); },
                                 {x});
  }
  // x - x is zero, and so is its gradient.
  Tape tape;
  auto l = test::weighted_sum(tape, nn::sub(tape, x, x), r);
  distop::backward(tape, l);
  for (double g : x.grad().local().to_vector()) EXPECT_EQ(g, 0.0);
}

TEST(Arithmetic, OnlyTheOperandThatRequiresAGradientGetsOne) {
  Var<double> a(random_tensor<double>(local_space(Shape{2, 3}), 1), false);
  Var<double> b(random_tensor<double>(local_space(Shape{3}), 2), true);
  const auto r = random_tensor<double>(local_space(Shape{2, 3}), 3);
  Tape tape;
  auto l = test::weighted_sum(tape, nn::add(tape, a, b), r);
  distop::backward(tape, l);
  EXPECT_FALSE(a.has_grad());
  ASSERT_TRUE(b.has_grad());
  const auto rv = r.local().to_vector();
  const auto db = b.grad().local().to_vector();
  for (std::size_t j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(db[j], rv[j] + rv[3 + j]);
}

TEST(Arithmetic, ScaleByAConstant) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4}), 6), true);
  Tape tape;
  const auto y = nn::scale(tape, x, -2.5).value().local().to_vector();
  const auto xv = x.value().local().to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], -2.5 * xv[i]);
  tape.clear();
  const auto r = random_tensor<double>(x.space(), 7);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::scale(t, x, -2.5), r); }, {x});
}

TEST(Arithmetic, ScaleByAScalarVar) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4}), 6), true);
  Var<double> s(random_tensor<double>(local_space(Shape{1}), 8, 0.5, 2.0), true);
  Tape tape;
  const auto y = nn::scale(tape, x, s).value().local().to_vector();
  const auto xv = x.value().local().to_vector();
  const double sv = s.value().local().to_vector()[0];
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], sv * xv[i]);
  tape.clear();
  const auto r = random_tensor<double>(x.space(), 7);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::scale(t, x, s), r); }, {x, s});
  // A learnable temperature on both sides of a product.
  test::expect_gradients_match(
      [&](Tape& t) {
        auto z = nn::scale(t, x, s);
        return test::weighted_sum(t, nn::mul(t, z, nn::scale(t, x, s)), r);
      },
      {x, s});
}

TEST(Arithmetic, FloatMatchesDouble) {
  const auto space = local_space(Shape{6, 5});
  const auto bd = random_tensor<double>(local_space(Shape{5}), 9);
  DistTensor<float> bf(bd.space());
  {
    const auto v = bd.local().to_vector();
    bf.local().copy_from(
        distop::Tensor<float>::from_vector(Shape{5}, std::vector<float>(v.begin(), v.end())));
  }
  test::expect_float_matches_double(
      space,
      [&](Tape& t, const Var<double>& x) {
        auto m = nn::mean(t, x, {1}, true);
        auto z = nn::div(t, nn::mul(t, x, Var<double>(bd)), nn::add(t, nn::mul(t, m, m), 1.0));
        return nn::scale(t, nn::sub(t, z, x), 3.0);
      },
      [&](Tape& t, const Var<float>& x) {
        auto m = nn::mean(t, x, {1}, true);
        auto z = nn::div(t, nn::mul(t, x, Var<float>(bf)), nn::add(t, nn::mul(t, m, m), 1.0));
        return nn::scale(t, nn::sub(t, z, x), 3.0);
      },
      1e-6);
}

// docs/operations.md's make_function example, as written there.
template <class T>
Var<T> square(Tape& tape, const Var<T>& x) {
  using namespace distop;
  return make_function<T>(tape, "square", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(x.space());
    kernels::mul(T(1), x.value().local(), x.value().local(), T(0), y.local());  // y = x x
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      const Tensor<T>& xv = grads.input(0).value().local();
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        kernels::mul(T(2), dy.local(), xv, beta, g);  // g = beta g + 2 dy x
                      });
                    }};
  });
}

TEST(Arithmetic, TheDocumentedMakeFunctionExample) {
  Var<double> x(random_tensor<double>(local_space(Shape{3, 4}), 10), true);
  const auto r = random_tensor<double>(x.space(), 11);
  Tape tape;
  const auto y = square(tape, x).value().local().to_vector();
  const auto xv = x.value().local().to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], xv[i] * xv[i]);
  tape.clear();
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::mul(t, square(t, x), x), r); }, {x});
}

TEST(Arithmetic, MismatchedOperandsAreErrors) {
  Tape tape;
  Var<double> a(random_tensor<double>(local_space(Shape{4, 3}), 1), true);
  auto operand = [](const Shape& s) { return Var<double>(DistTensor<double>(local_space(s))); };
  for (const auto& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_THROW(c.op(tape, a, operand(Shape{4, 4})), Error);     // other trailing extent
    EXPECT_THROW(c.op(tape, a, operand(Shape{2, 3})), Error);     // rows that are not 1
    EXPECT_THROW(c.op(tape, a, operand(Shape{4})), Error);        // not the trailing shape
    EXPECT_THROW(c.op(tape, a, operand(Shape{1, 1, 3})), Error);  // one axis too many
    EXPECT_THROW(c.op(tape, a, operand(Shape{4, 3, 1})), Error);
    EXPECT_THROW(c.op(tape, a, Var<double>()), Error);  // undefined
  }
  EXPECT_THROW(nn::scale(tape, a, operand(Shape{2})), Error);  // not a scalar
  EXPECT_THROW(nn::scale(tape, a, operand(Shape{1, 1})), Error);
  EXPECT_EQ(tape.size(), 0u);
}

}  // namespace
