// make_function: a user-defined differentiable operation on the tape.

#include "distop/autodiff/function.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <span>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/kernels/axpy.hpp"
#include "gradcheck.hpp"

// Heap allocations made on this thread while counting, for
// MakeFunction.RecordingAllocatesOnlyTheOutputVar (a replacement of the global operator new, which
// otherwise only forwards to malloc). Host code only: nvcc would compile the replacement for the
// device too, where there are no exceptions.
namespace {
thread_local bool t_counting = false;
thread_local long t_allocations = 0;
}  // namespace
#ifndef __CUDA_ARCH__
void* operator new(std::size_t n) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(n > 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC does not see that this operator new takes its memory from malloc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace distop {
namespace {

using test::expect_gradients_match;
using test::local_batch_space;
using test::random_tensor;
using test::weighted_sum;

// y = x * x entrywise, written as a user would (docs/models.md shows it).
// [square]
template <class T>
Var<T> square(Tape& tape, const Var<T>& x) {
  return make_function<T>(tape, "square", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(x.space());
    auto xv = x.value().local().view();
    auto yv = y.local().view();
    Kokkos::parallel_for(
        "square", y.local_numel(), KOKKOS_LAMBDA(std::int64_t i) { yv(i) = xv(i) * xv(i); });
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      // g = beta g + 2 x dy, straight into x's gradient (beta is 0 or 1).
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        auto gv = g.view();
                        auto xs = grads.input(0).value().local().view();
                        auto dv = dy.local().view();
                        Kokkos::parallel_for(
                            "square_backward", g.numel(), KOKKOS_LAMBDA(std::int64_t i) {
                              gv(i) = (beta == T(0) ? T(0) : beta * gv(i)) + 2 * xs(i) * dv(i);
                            });
                      });
                    }};
  });
}
// [square]

// (a, b) = (x, 3 x): two outputs, the first a pass-through of the input's storage.
template <class T>
std::vector<Var<T>> copy_and_triple(Tape& tape, const Var<T>& x) {
  return make_function<T>(tape, "copy_and_triple", {x}, [&] {
    std::vector<DistTensor<T>> values;
    values.push_back(x.value().clone());
    DistTensor<T> t = x.value().clone();
    auto tv = t.local().to_vector();
    for (auto& v : tv) v *= 3;
    t.local().copy_from(Tensor<T>::from_vector(t.local().shape(), tv));
    values.push_back(std::move(t));
    return Computed{std::move(values),
                    [](std::span<const DistTensor<T>* const> dys, Gradients<T>& grads) {
                      if (dys[0]) grads.add_output_grad(0, 0);
                      if (dys[1]) {
                        DistTensor<T> g = dys[1]->clone();
                        auto gv = g.local().to_vector();
                        for (auto& v : gv) v *= 3;
                        g.local().copy_from(Tensor<T>::from_vector(g.local().shape(), gv));
                        grads.add(0, std::move(g));
                      }
                    }};
  });
}

// What an operation hands back, for the tests below: `value` and a backward `f`.
template <class F>
auto returning(DistTensor<double> value, F f) {
  return [value = std::move(value), f = std::move(f)]() mutable {
    return Computed{std::move(value), std::move(f)};
  };
}

// y = sum_i (i + 1) x_i over n inputs of one space: more inputs than make_function holds in place.
Var<double> weighted_inputs(Tape& tape, const std::vector<Var<double>>& xs) {
  return make_function<double>(tape, "weighted_inputs", xs, [&] {
    DistTensor<double> y(xs[0].space());
    for (std::size_t i = 0; i < xs.size(); ++i)
      kernels::axpy(double(i + 1), xs[i].value().local(), y.local());
    return Computed{std::move(y), [](const DistTensor<double>& dy, Gradients<double>& grads) {
                      for (std::size_t i = 0; i < grads.size(); ++i)
                        grads.accumulate(i, [&](double beta, Tensor<double>& g) {
                          if (beta == 0) g.fill(0.0);
                          kernels::axpy(double(i + 1), dy.local(), g);
                        });
                    }};
  });
}

TEST(MakeFunction, ForwardLearnsWhetherTheBackwardWillRun) {
  const auto space = local_batch_space(2, 2);
  for (const bool wanted : {false, true}) {
    Var<double> x(random_tensor<double>(space, 1), wanted);
    Tape tape;
    bool seen = !wanted;
    auto y = make_function<double>(tape, "probe", {x}, [&](bool recording) {
      seen = recording;
      return Computed{x.value().clone(), [](const DistTensor<double>&, Gradients<double>&) {}};
    });
    EXPECT_EQ(seen, wanted);
    EXPECT_EQ(y.requires_grad(), wanted);
    EXPECT_EQ(tape.size(), wanted ? 1u : 0u);
  }
}

TEST(MakeFunction, ManyInputsFromAVector) {
  const auto space = local_batch_space(2, 3);
  for (const std::size_t n : {1u, 4u, 5u, 9u}) {
    std::vector<Var<double>> xs;
    for (std::size_t i = 0; i < n; ++i)
      xs.emplace_back(random_tensor<double>(space, 20 + i), i % 3 != 1);  // some need none
    const auto r = random_tensor<double>(space, 3);
    std::vector<Var<double>> wrt;
    for (const auto& x : xs)
      if (x.requires_grad()) wrt.push_back(x);
    expect_gradients_match([&](Tape& t) { return weighted_sum(t, weighted_inputs(t, xs), r); },
                           wrt);
    for (const auto& x : xs) EXPECT_FALSE(x.has_grad() && !x.requires_grad());
  }
}

// Recording an operation of up to four inputs allocates nothing but its output Var, also with
// the ready hooks data parallelism sets (a layer's step allocates no more than its tensors).
TEST(MakeFunction, RecordingAllocatesOnlyTheOutputVar) {
  const auto space = local_batch_space(2, 2);
  Var<double> a(random_tensor<double>(space, 1), true), b(random_tensor<double>(space, 2), true),
      c(random_tensor<double>(space, 3), true);
  Tape tape;
  const auto allocations = [&] {
    DistTensor<double> value = a.value().clone();
    t_allocations = 0;
    t_counting = true;
    {
      const Var<double> y = make_function<double>(tape, "op", {a, b, c}, [&] {
        return Computed{std::move(value), [](const DistTensor<double>&, Gradients<double>&) {}};
      });
    }
    t_counting = false;
    tape.clear();
    return t_allocations;
  };
  allocations();  // the tape's first block
  EXPECT_EQ(allocations(), 1);
  for (const auto& v : {a, b, c}) v.set_ready_hook([] {});
  EXPECT_EQ(allocations(), 1);
  for (const auto& v : {a, b, c}) v.set_ready_hook({});
}

TEST(MakeFunction, GradientMatchesFiniteDifferences) {
  const auto space = local_batch_space(3, 4);
  Var<double> x(random_tensor<double>(space, 7), true);
  const auto r = random_tensor<double>(space, 8);
  expect_gradients_match([&](Tape& t) { return weighted_sum(t, square(t, x), r); }, {x});
}

TEST(MakeFunction, TwoOutputsAndAVarUsedTwice) {
  const auto space = local_batch_space(2, 3);
  Var<double> x(random_tensor<double>(space, 1), true);
  const auto r1 = random_tensor<double>(space, 2);
  const auto r2 = random_tensor<double>(space, 3);
  expect_gradients_match(
      [&](Tape& t) {
        auto ab = copy_and_triple(t, x);
        auto s = square(t, ab[0]);  // x used again through the first output
        auto l1 = weighted_sum(t, s, r1);
        auto l2 = weighted_sum(t, ab[1], r2);
        return make_function<double>(t, "add", {l1, l2}, [&] {
          auto v = l1.value().clone();
          v.local().fill(l1.value().local().to_vector()[0] + l2.value().local().to_vector()[0]);
          return Computed{std::move(v), [](const DistTensor<double>&, Gradients<double>& g) {
                            g.add_output_grad(0);
                            g.add_output_grad(1);
                          }};
        });
      },
      {x});
}

TEST(MakeFunction, OnlyTheOutputThatReceivedAGradientIsSeen) {
  const auto space = local_batch_space(2, 2);
  Var<double> x(random_tensor<double>(space, 4), true);
  Tape tape;
  auto ab = copy_and_triple(tape, x);
  auto l = weighted_sum(tape, ab[1], random_tensor<double>(space, 5));
  backward(tape, l);
  ASSERT_TRUE(x.has_grad());
  const auto r = random_tensor<double>(space, 5).local().to_vector();
  const auto g = x.grad().local().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], 3 * r[i]);
}

TEST(MakeFunction, NothingIsRecordedWithoutAnInputThatRequiresAGradient) {
  const auto space = local_batch_space(2, 2);
  Var<double> x(random_tensor<double>(space, 4), false);
  Tape tape;
  auto y = square(tape, x);
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_FALSE(y.requires_grad());
}

TEST(MakeFunction, NonCollectiveBackwardSkippedWithoutGradientCollectiveRunsWithZeros) {
  const auto space = local_batch_space(2, 2);
  Var<double> x(random_tensor<double>(space, 4), true);
  for (const bool collective : {false, true}) {
    Tape tape;
    int calls = 0;
    double seen = -1;
    auto unused =
        make_function<double>(tape, "probe", {x},
                              returning(x.value().clone(),
                                        [&](const DistTensor<double>& dy, Gradients<double>&) {
                                          ++calls;
                                          seen = 0;
                                          for (double v : dy.local().to_vector()) seen += v * v;
                                        }),
                              FunctionOptions{.collective = collective});
    auto l = weighted_sum(tape, square(tape, x), random_tensor<double>(space, 6));
    backward(tape, l);
    EXPECT_EQ(calls, collective ? 1 : 0) << "collective " << collective;
    if (collective) {
      EXPECT_EQ(seen, 0.0);
    }
    x.zero_grad();
  }
}

TEST(MakeFunction, OneOutputGradientHandedOnToTwoInputsReachesBoth) {
  const auto space = local_batch_space(2, 2);
  Var<double> a(random_tensor<double>(space, 4), true);
  Var<double> b(random_tensor<double>(space, 5), true);
  Tape tape;
  auto y = make_function<double>(
      tape, "twice", {a, b},
      returning(a.value().clone(), [](const DistTensor<double>&, Gradients<double>& g) {
        g.add_output_grad(0);
        g.add_output_grad(1);
        g.add_output_grad(1);  // b counted twice
      }));
  const auto r = random_tensor<double>(space, 1);
  auto l = weighted_sum(tape, y, r);
  backward(tape, l);
  const auto rv = r.local().to_vector();
  const auto ga = a.grad().local().to_vector(), gb = b.grad().local().to_vector();
  for (std::size_t i = 0; i < rv.size(); ++i) {
    EXPECT_EQ(ga[i], rv[i]);
    EXPECT_EQ(gb[i], 2 * rv[i]);
  }
  EXPECT_FALSE(a.grad().local().shares_storage() && b.grad().local().shares_storage());
}

TEST(MakeFunction, UndefinedInputIsAnError) {
  Tape tape;
  Var<double> undefined;
  bool ran = false;
  EXPECT_THROW(make_function<double>(tape, "f", {undefined},
                                     [&] {
                                       ran = true;
                                       return Computed{
                                           DistTensor<double>(local_batch_space(1, 1)),
                                           [](const DistTensor<double>&, Gradients<double>&) {}};
                                     }),
               Error);
  EXPECT_FALSE(ran) << "the forward ran before the inputs were checked";
}

TEST(MakeFunction, AddWithAWrongSpaceIsAnError) {
  const auto space = local_batch_space(2, 2);
  Var<double> x(random_tensor<double>(space, 4), true);
  Tape tape;
  auto y = make_function<double>(
      tape, "bad", {x},
      returning(x.value().clone(), [](const DistTensor<double>&, Gradients<double>& g) {
        g.add(0, DistTensor<double>(local_batch_space(3, 2)));
      }));
  auto l = weighted_sum(tape, y, random_tensor<double>(space, 1));
  EXPECT_THROW(backward(tape, l), Error);
}

}  // namespace
}  // namespace distop

namespace distop {
namespace {

TEST(BackwardFromAGradient, SeedsTheOutputGradientGiven) {
  const auto space = test::local_batch_space(2, 3);
  Var<double> x(test::random_tensor<double>(space, 4), true);
  const auto dy = test::random_tensor<double>(space, 5);
  Tape tape;
  auto y = square(tape, x);
  backward(tape, y, dy);
  const auto g = x.grad().local().to_vector();
  const auto xv = x.value().local().to_vector();
  const auto d = dy.local().to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], 2 * xv[i] * d[i]);
  EXPECT_THROW(backward(tape, y, dy), Error);  // replayed already
  Tape again;
  auto z = square(again, x);
  EXPECT_THROW(backward(again, z, DistTensor<double>(test::local_batch_space(3, 3))), Error);
}

}  // namespace
}  // namespace distop
