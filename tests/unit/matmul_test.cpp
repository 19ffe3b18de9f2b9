// nn::matmul, matmul_nt and matmul_tn: values against naive loops, output spaces, gradients
// against finite differences, explicit output spaces, an empty contraction, bad operands.
#include "distop/nn/matmul.hpp"

#include <gtest/gtest.h>

#include <vector>

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

struct Form {
  const char* name;
  Var<double> (*op)(Tape&, const Var<double>&, const Var<double>&);
  Var<double> (*op_in)(Tape&, const Var<double>&, const Var<double>&, const distop::TensorSpace&);
  bool ta, tb;  // whether A, B are stored transposed
};

std::vector<Form> forms() {
  return {{"matmul", nn::matmul<double>, nn::matmul<double>, false, false},
          {"matmul_nt", nn::matmul_nt<double>, nn::matmul_nt<double>, false, true},
          {"matmul_tn", nn::matmul_tn<double>, nn::matmul_tn<double>, true, false}};
}

// op(A) [m, k] op(B) [k, n], naively.
std::vector<double> naive(const Form& f, const std::vector<double>& a, const std::vector<double>& b,
                          std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l) {
        const double av =
            f.ta ? a[static_cast<std::size_t>(l * m + i)] : a[static_cast<std::size_t>(i * k + l)];
        const double bv =
            f.tb ? b[static_cast<std::size_t>(j * k + l)] : b[static_cast<std::size_t>(l * n + j)];
        c[static_cast<std::size_t>(i * n + j)] += av * bv;
      }
  return c;
}

Shape a_shape(const Form& f, std::int64_t m, std::int64_t k) {
  return f.ta ? Shape{k, m} : Shape{m, k};
}
Shape b_shape(const Form& f, std::int64_t k, std::int64_t n) {
  return f.tb ? Shape{n, k} : Shape{k, n};
}

TEST(Matmul, ValuesAndSpaces) {
  const std::int64_t m = 4, k = 3, n = 5;
  for (const auto& f : forms()) {
    SCOPED_TRACE(f.name);
    Var<double> a(random_tensor<double>(local_space(a_shape(f, m, k)), 1), false);
    Var<double> b(random_tensor<double>(local_space(b_shape(f, k, n)), 2), false);
    Tape tape;
    auto c = f.op(tape, a, b);
    EXPECT_EQ(c.space().global_shape(), (Shape{m, n}));
    const auto want =
        naive(f, a.value().local().to_vector(), b.value().local().to_vector(), m, k, n);
    const auto got = c.value().local().to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14);
    // The same product into a given space.
    auto c2 = f.op_in(tape, a, b, local_space(Shape{m, n}));
    EXPECT_EQ(c2.value().local().to_vector(), got);
  }
}

TEST(Matmul, GradientsMatchFiniteDifferences) {
  const std::int64_t m = 3, k = 4, n = 2;
  for (const auto& f : forms()) {
    SCOPED_TRACE(f.name);
    Var<double> a(random_tensor<double>(local_space(a_shape(f, m, k)), 3), true);
    Var<double> b(random_tensor<double>(local_space(b_shape(f, k, n)), 4), true);
    const auto r = random_tensor<double>(local_space(Shape{m, n}), 5);
    test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, f.op(t, a, b), r); },
                                 {a, b});
    test::expect_gradients_match(
        [&](Tape& t) {
          return test::weighted_sum(t, f.op_in(t, a, b, local_space(Shape{m, n})), r);
        },
        {a, b});
  }
  // A A^T: one Var as both operands.
  Var<double> a(random_tensor<double>(local_space(Shape{3, 4}), 6), true);
  const auto r = random_tensor<double>(local_space(Shape{3, 3}), 7);
  test::expect_gradients_match(
      [&](Tape& t) { return test::weighted_sum(t, nn::matmul_nt(t, a, a), r); }, {a});
}

TEST(Matmul, NothingToContractGivesZerosAndZeroGradients) {
  Var<double> a(DistTensor<double>(local_space(Shape{2, 0})), true);
  Var<double> b(DistTensor<double>(local_space(Shape{0, 3})), true);
  Tape tape;
  auto c = nn::matmul(tape, a, b);
  EXPECT_EQ(c.value().local().to_vector(), std::vector<double>(6, 0.0));
  // A batch of no rows: the weight's gradient is zero.
  Var<double> x(DistTensor<double>(local_space(Shape{0, 3})), true);
  Var<double> w(random_tensor<double>(local_space(Shape{3, 2}), 8), true);
  auto y = nn::matmul(tape, x, w);
  auto l = test::weighted_sum(tape, y, DistTensor<double>(y.space()));
  distop::backward(tape, l);
  ASSERT_TRUE(w.has_grad());
  EXPECT_EQ(w.grad().local().to_vector(), std::vector<double>(6, 0.0));
}

TEST(Matmul, FloatMatchesDouble) {
  const auto wd = random_tensor<double>(local_space(Shape{6, 4}), 9);
  const auto wf = random_tensor<float>(local_space(Shape{6, 4}), 9);
  test::expect_float_matches_double(
      local_space(Shape{5, 6}),
      [&](Tape& t, const Var<double>& x) { return nn::matmul(t, x, Var<double>(wd)); },
      [&](Tape& t, const Var<float>& x) { return nn::matmul(t, x, Var<float>(wf)); }, 1e-5);
}

TEST(Matmul, MismatchedOperandsAreErrors) {
  auto var = [](const Shape& s) { return Var<double>(DistTensor<double>(local_space(s)), true); };
  Tape tape;
  EXPECT_THROW(nn::matmul(tape, var(Shape{2, 3}), var(Shape{4, 5})), Error);  // k: 3 vs 4
  EXPECT_THROW(nn::matmul_nt(tape, var(Shape{2, 3}), var(Shape{5, 4})), Error);
  EXPECT_THROW(nn::matmul_tn(tape, var(Shape{3, 2}), var(Shape{4, 5})), Error);
  EXPECT_THROW(nn::matmul(tape, var(Shape{2, 3, 1}), var(Shape{3, 5})), Error);  // not 2-D
  EXPECT_THROW(nn::matmul(tape, var(Shape{6}), var(Shape{6, 1})), Error);
  // A given output space whose box does not fit the product.
  EXPECT_THROW(nn::matmul(tape, var(Shape{2, 3}), var(Shape{3, 5}), local_space(Shape{2, 4})),
               Error);
  EXPECT_EQ(tape.size(), 0u);
}

}  // namespace
