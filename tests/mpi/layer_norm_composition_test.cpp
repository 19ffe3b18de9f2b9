// torch.nn.LayerNorm's forward over the last axis, composed of nn's elementwise operations with
// no matmul by a row of ones: mean with keepdim, sub, mul, mean, add eps, rsqrt (or sqrt and div),
// mul by the weight [D] and add the bias [D], both broadcast. At 1 rank and with the batch split
// over the ranks (balanced and uneven), the weight and bias replicated on the input's partition or
// a copy on each process: values against a direct computation in double, gradients against finite
// differences and against the one-rank run, float against double.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/pointwise.hpp"
#include "distop/nn/reduction.hpp"
#include "gradcheck.hpp"
#include "mpi_gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::world_size;

namespace {

constexpr double kEps = 1e-5;

// y = (x - mean(x)) / sqrt(var(x) + eps) * w + b over the last axis, var the biased variance.
template <class T>
Var<T> layer_norm(Tape& t, const Var<T>& x, const Var<T>& w, const Var<T>& b, bool via_rsqrt) {
  auto mu = nn::mean(t, x, {-1}, true);
  auto xc = nn::sub(t, x, mu);
  auto var = nn::mean(t, nn::mul(t, xc, xc), {-1}, true);
  auto shifted = nn::add(t, var, kEps);
  auto xhat =
      via_rsqrt ? nn::mul(t, xc, nn::rsqrt(t, shifted)) : nn::div(t, xc, nn::sqrt(t, shifted));
  return nn::add(t, nn::mul(t, xhat, w), b);
}

// The same, directly, on the global tensor in double.
std::vector<double> direct(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& b) {
  const std::size_t d = w.size();
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    var /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(var + kEps) * w[j] + b[j];
  }
  return y;
}

struct Layout {
  std::string name;
  TensorSpace x;      // the batch split over the ranks
  TensorSpace param;  // [D], where the weight and bias live
};

// [shape] with the batch split into `parts` over the world; the other axes whole.
TensorSpace batch_split(const Partition& p, const Shape& shape, std::vector<std::int64_t> parts) {
  std::vector<std::vector<std::int64_t>> extents{std::move(parts)};
  std::vector<int> map{0};
  for (int a = 1; a < shape.rank(); ++a) {
    extents.push_back({shape[a]});
    map.push_back(-1);
  }
  return TensorSpace(p, Decomposition::blocks(shape, p.shape(), extents, map));
}

std::vector<Layout> layouts(const Shape& shape) {
  const int n = world_size();
  const std::int64_t d = shape[shape.rank() - 1];
  const Partition world = Partition::world(Shape{n});
  const TensorSpace replicated(world, Decomposition::balanced(Shape{d}, world.shape(), {-1}));
  std::vector<std::vector<std::int64_t>> splits;
  const auto bounds = balanced_bounds(shape[0], n);
  splits.emplace_back();
  for (int i = 0; i < n; ++i) splits.back().push_back(bounds[i + 1] - bounds[i]);
  if (n >= 2) {
    splits.emplace_back(static_cast<std::size_t>(n), 1);
    splits.back().back() = shape[0] - (n - 1);
  }
  std::vector<Layout> out;
  for (std::size_t s = 0; s < splits.size(); ++s) {
    const std::string split = s == 0 ? "balanced" : "uneven";
    out.push_back(
        {split + ", parameters replicated", batch_split(world, shape, splits[s]), replicated});
    out.push_back({split + ", parameters on each process", batch_split(world, shape, splits[s]),
                   local_space(Shape{d})});
  }
  return out;
}

const std::vector<Shape> kShapes{Shape{6, 8}, Shape{4, 2, 8}};

struct Outcome {
  Var<double> x, w, b, y;
};

Outcome run(const TensorSpace& xs, const TensorSpace& ps, bool via_rsqrt) {
  Var<double> x(random_tensor<double>(xs, 1, -2, 2), true);
  Var<double> w(random_tensor<double>(ps, 2, 0.5, 1.5), true);
  Var<double> b(random_tensor<double>(ps, 3), true);
  Tape tape;
  Var<double> y = layer_norm(tape, x, w, b, via_rsqrt);
  auto l = test::weighted_sum(tape, y, random_tensor<double>(xs, 4));
  backward(tape, l);
  return {x, w, b, y};
}

void expect_box(const DistTensor<double>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  distop::test::expect_box_near(got, want, tol, what);
}

}  // namespace

TEST(LayerNormComposition, ValuesEqualTheDirectComputation) {
  for (const Shape& shape : kShapes) {
    const Shape pshape{shape[shape.rank() - 1]};
    const auto want =
        direct(random_tensor<double>(local_space(shape), 1, -2, 2).local().to_vector(),
               random_tensor<double>(local_space(pshape), 2, 0.5, 1.5).local().to_vector(),
               random_tensor<double>(local_space(pshape), 3).local().to_vector());
    for (bool via_rsqrt : {true, false}) {
      SCOPED_TRACE(shape.str() + (via_rsqrt ? ", rsqrt" : ", sqrt and div"));
      const Outcome one = run(local_space(shape), local_space(pshape), via_rsqrt);
      expect_box(one.y.value(), want, 1e-13, "one rank");
      for (const auto& l : layouts(shape)) {
        SCOPED_TRACE(l.name);
        const Outcome d = run(l.x, l.param, via_rsqrt);
        expect_box(d.y.value(), want, 1e-13, "y");
        // Gradients: x's box as the one-rank run's, the copies' of w and b adding up to its.
        expect_box(d.x.grad(), one.x.grad().local().to_vector(), 1e-12, "dx");
        for (const auto& [got, ref, what] :
             {std::tuple{d.w, one.w, "dw"}, std::tuple{d.b, one.b, "db"}}) {
          const auto r = ref.grad().local().to_vector();
          const auto g = distop::test::sum_over_ranks(got.grad(), r.size());
          for (std::size_t i = 0; i < r.size(); ++i)
            EXPECT_NEAR(g[i], r[i], 1e-12 * std::max(1.0, std::abs(r[i]))) << what << " " << i;
        }
      }
    }
  }
}

TEST(LayerNormComposition, GradientsMatchFiniteDifferences) {
  for (const Shape& shape : kShapes) {
    const Shape pshape{shape[shape.rank() - 1]};
    // (testing::gradcheck takes inputs on partitions of one parent: the parameters on
    // Partition::self beside a batch split over the world are left to the one-rank comparison.)
    std::vector<Layout> all;
    for (const auto& l : layouts(shape))
      if (l.param.partition().same_as(l.x.partition())) all.push_back(l);
    all.push_back({"one rank", local_space(shape), local_space(pshape)});
    for (const auto& l : all) {
      for (bool via_rsqrt : {true, false}) {
        SCOPED_TRACE(shape.str() + ", " + l.name + (via_rsqrt ? ", rsqrt" : ", sqrt and div"));
        Var<double> x(random_tensor<double>(l.x, 1, -2, 2), true);
        Var<double> w(random_tensor<double>(l.param, 2, 0.5, 1.5), true);
        Var<double> b(random_tensor<double>(l.param, 3), true);
        const auto r = random_tensor<double>(l.x, 4);
        test::expect_gradients_match_everywhere(
            [&](Tape& t) { return test::weighted_sum(t, layer_norm(t, x, w, b, via_rsqrt), r); },
            {x, w, b}, 1e-6, 1e-6);
      }
    }
  }
}

TEST(LayerNormComposition, FloatMatchesDouble) {
  for (const Shape& shape : kShapes) {
    for (const auto& l : layouts(shape)) {
      SCOPED_TRACE(shape.str() + ", " + l.name);
      const auto wf = random_tensor<float>(l.param, 2, 0.5, 1.5);
      const auto bf = random_tensor<float>(l.param, 3);
      test::expect_float_matches_double(
          l.x,
          [&](Tape& t, const Var<double>& x) {
            return layer_norm(t, x, Var<double>(test::widened(wf)), Var<double>(test::widened(bf)),
                              true);
          },
          [&](Tape& t, const Var<float>& x) {
            return layer_norm(t, x, Var<float>(wf), Var<float>(bf), true);
          },
          2e-5);
    }
  }
}
