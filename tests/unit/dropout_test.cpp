// Dropout: the mask's statistics and values, its independence of the box it is drawn for, the
// gradient, the identity cases and bad input; the Dropout module's masks call after call, its call
// count, its evaluation mode and its lack of state.
#include "distop/nn/dropout.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/dropout.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/sequential.hpp"
#include "gradcheck.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tape;
using distop::Tensor;
using distop::Var;
using distop::nn::Dropout;
namespace test = distop::test;

TEST(Dropout, DropsAboutPAndScalesTheRest) {
  const double p = 0.3;
  auto xv = test::random_tensor<double>(test::local_batch_space(100, 50), 1, 0.5, 1.5);
  Tape tape;
  auto y = distop::nn::dropout(tape, Var<double>(xv), p, 42);
  const auto x = xv.local().to_vector();
  const auto v = y.value().local().to_vector();
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(v[i], x[i] / (1 - p), 1e-15);
    }
  }
  // 5000 draws: the dropped fraction lies within 5 standard deviations (0.0065) of p.
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(v.size()), p, 0.033);
  // Another seed, another mask.
  auto y2 = distop::nn::dropout(tape, Var<double>(xv), p, 43);
  EXPECT_NE(y2.value().local().to_vector(), v);
}

TEST(Dropout, MaskDependsOnTheGlobalIndexOnly) {
  // The box [1:3, 2:5] of a [4, 6] tensor drops exactly what the whole tensor drops there.
  const Shape global{4, 6};
  std::vector<double> ones(24, 1.0);
  Tensor<double> whole = Tensor<double>::from_vector(global, ones), y_whole(global);
  distop::kernels::dropout(whole, global, {0, 0}, 0.5, 7, 0.0, y_whole);
  Tensor<double> box = Tensor<double>::from_vector(Shape{2, 3}, std::vector<double>(6, 1.0)),
                 y_box(Shape{2, 3});
  distop::kernels::dropout(box, global, {1, 2}, 0.5, 7, 0.0, y_box);
  const auto w = y_whole.to_vector();
  const auto b = y_box.to_vector();
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t c = 0; c < 3; ++c) EXPECT_EQ(b[r * 3 + c], w[(r + 1) * 6 + c + 2]);
}

TEST(Dropout, GradientMatchesFiniteDifferences) {
  Var<double> x(test::random_tensor<double>(test::local_batch_space(5, 7), 3), true);
  const auto r = test::random_tensor<double>(x.space(), 4);
  test::expect_gradients_match(
      [&](Tape& tape) { return test::weighted_sum(tape, distop::nn::dropout(tape, x, 0.4, 9), r); },
      {x});
}

TEST(Dropout, IdentityWhenNotTrainingOrPZeroAndZeroAtPOne) {
  Var<double> x(test::random_tensor<double>(test::local_batch_space(3, 4), 5), true);
  Tape tape;
  EXPECT_TRUE(distop::nn::dropout(tape, x, 0.5, 1, false).same_as(x));
  EXPECT_TRUE(distop::nn::dropout(tape, x, 0.0, 1).same_as(x));
  EXPECT_EQ(tape.size(), 0u);
  auto y = distop::nn::dropout(tape, x, 1.0, 1);
  EXPECT_EQ(y.value().local().to_vector(), std::vector<double>(12, 0.0));
}

TEST(Dropout, BadProbabilityIsAnError) {
  Var<float> x(DistTensor<float>(test::local_batch_space(2, 2)));
  Tape tape;
  EXPECT_THROW(distop::nn::dropout(tape, x, -0.1, 1), distop::Error);
  EXPECT_THROW(distop::nn::dropout(tape, x, 1.5, 1), distop::Error);
  Tensor<float> t(Shape{2, 2}), u(Shape{2, 2});
  EXPECT_THROW(distop::kernels::dropout(t, Shape{2, 2}, {1, 0}, 0.5, 1, 0.0f, u), distop::Error);
  EXPECT_THROW(distop::kernels::dropout(t, Shape{2, 2, 1}, {0, 0}, 0.5, 1, 0.0f, u), distop::Error);
}

// The module's outputs for `calls` training calls on the same input.
std::vector<std::vector<float>> module_outputs(Dropout<float>& drop, const Var<float>& x,
                                               int calls) {
  std::vector<std::vector<float>> out;
  for (int k = 0; k < calls; ++k) {
    Tape tape;
    out.push_back(drop.forward(tape, x).value().local().to_vector());
  }
  return out;
}

Var<float> ones(std::int64_t rows, std::int64_t cols, bool requires_grad = false) {
  DistTensor<float> t(test::local_batch_space(rows, cols));
  t.local().fill(1.0f);
  return Var<float>(std::move(t), requires_grad);
}

TEST(DropoutModule, EachTrainingCallDrawsANewMaskAndCountsIt) {
  Dropout<float> drop(0.5, {.seed = 3});
  EXPECT_EQ(drop.p(), 0.5);
  EXPECT_EQ(drop.seed(), 3u);
  EXPECT_EQ(drop.calls(), 0u);
  const auto y = module_outputs(drop, ones(8, 16), 3);
  EXPECT_EQ(drop.calls(), 3u);
  EXPECT_NE(y[0], y[1]);
  EXPECT_NE(y[1], y[2]);
  EXPECT_NE(y[0], y[2]);
  // Call k is nn::dropout with the seed random::bits(seed, k).
  for (std::uint64_t k = 0; k < 3; ++k) {
    Tape tape;
    EXPECT_EQ(distop::nn::dropout(tape, ones(8, 16), 0.5, distop::random::bits(3, k))
                  .value()
                  .local()
                  .to_vector(),
              y[k])
        << "call " << k;
  }
}

TEST(DropoutModule, SameSeedSameMasksAndTheCountResumesThem) {
  Dropout<float> a(0.3, {.seed = 11}), b(0.3, {.seed = 11}), c(0.3, {.seed = 12});
  const auto ya = module_outputs(a, ones(4, 32), 4);
  EXPECT_EQ(module_outputs(b, ones(4, 32), 4), ya);
  EXPECT_NE(module_outputs(c, ones(4, 32), 1)[0], ya[0]);
  // As a resumed run restores it: after set_calls(2) the next masks are calls 2 and 3.
  Dropout<float> resumed(0.3, {.seed = 11});
  resumed.set_calls(2);
  EXPECT_EQ(resumed.calls(), 2u);
  const auto yr = module_outputs(resumed, ones(4, 32), 2);
  EXPECT_EQ(yr[0], ya[2]);
  EXPECT_EQ(yr[1], ya[3]);
  EXPECT_EQ(resumed.calls(), 4u);
}

TEST(DropoutModule, EvaluationModeIsTheIdentityAndDoesNotCount) {
  Dropout<float> drop(0.5, {.seed = 1});
  const auto x = ones(3, 5, true);
  drop.eval();
  Tape tape;
  EXPECT_TRUE(drop.forward(tape, x).same_as(x));
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_EQ(drop.calls(), 0u);
  drop.train();
  EXPECT_FALSE(drop.forward(tape, x).same_as(x));
  EXPECT_EQ(drop.calls(), 1u);
}

TEST(DropoutModule, PZeroIsTheIdentity) {
  Dropout<float> drop(0.0, {.seed = 1});
  const auto x = ones(3, 5, true);
  Tape tape;
  EXPECT_TRUE(drop.forward(tape, x).same_as(x));
  EXPECT_EQ(tape.size(), 0u);
  EXPECT_EQ(drop.calls(), 1u) << "a training call counts whatever p is";
}

TEST(DropoutModule, BackwardUsesTheForwardCallsMask) {
  Dropout<float> drop(0.4, {.seed = 5});
  (void)module_outputs(drop, ones(2, 2), 1);  // a call before, so this one is not call 0
  auto x = ones(6, 7, true);
  Tape tape;
  auto y = drop.forward(tape, x);
  (void)module_outputs(drop, ones(2, 2), 1);  // a call between forward and backward
  DistTensor<float> dy(y.space());
  dy.local().fill(1.0f);
  distop::backward(tape, y, dy);
  // x and dy are ones, so dx = m = y.
  EXPECT_EQ(x.grad().local().to_vector(), y.value().local().to_vector());
}

TEST(DropoutModule, ItsCallCountIsANonPersistentBuffer) {
  Dropout<float> drop(0.5, {.seed = 1});
  EXPECT_TRUE(drop.named_parameters().empty());
  // The call count is a non-persistent buffer: training state for checkpoints, not a weight.
  ASSERT_EQ(drop.named_buffers().size(), 1u);
  EXPECT_EQ(drop.named_buffers()[0].name, "calls");
  EXPECT_FALSE(drop.named_buffers()[0].persistent);
  EXPECT_TRUE(drop.state_dict().empty());
  // In a model: the state_dict has the Linear layers' entries alone.
  distop::nn::Sequential<float> net;
  auto inner = std::make_shared<distop::nn::Sequential<float>>();
  inner->add(std::make_shared<Dropout<float>>(0.2, distop::nn::DropoutOptions{.seed = 2}));
  net.add(std::make_shared<distop::nn::Linear<float>>(4, 3, distop::nn::LinearOptions{.seed = 1}))
      .add(std::make_shared<Dropout<float>>(0.1, distop::nn::DropoutOptions{.seed = 3}))
      .add(inner);
  std::vector<std::string> keys;
  for (const auto& [name, t] : net.state_dict()) keys.push_back(name);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.bias", "0.weight"}));
  std::vector<std::string> buffers;
  for (const auto& b : net.named_buffers()) buffers.push_back(b.name);
  EXPECT_EQ(buffers, (std::vector<std::string>{"1.calls", "2.0.calls"}));
  // load_state_dict neither needs nor takes the counts.
  EXPECT_TRUE(net.load_state_dict(net.state_dict()).missing_keys.empty());
  // Modes reach the modules inside.
  net.eval();
  EXPECT_FALSE(inner->training());
}

TEST(DropoutModule, BadProbabilityIsAnError) {
  EXPECT_THROW(Dropout<float>(-0.1), distop::Error);
  EXPECT_THROW(Dropout<float>(1.5), distop::Error);
  EXPECT_THROW(Dropout<double>(std::nan("")), distop::Error);
  EXPECT_NO_THROW(Dropout<double>(1.0));
}

}  // namespace
