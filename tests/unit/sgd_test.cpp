#include "distop/optim/sgd.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "distop/dist/dist_tensor.hpp"

namespace {

using distop::DistTensor;
using distop::Var;
using distop::optim::SGD;
using distop::optim::SGDOptions;

DistTensor<double> vec(const std::vector<double>& v) {
  DistTensor<double> t(distop::TensorSpace(distop::Shape{static_cast<std::int64_t>(v.size())},
                                           distop::Partition::self()));
  t.local().copy_from(distop::Tensor<double>::from_vector(t.space().local_shape(), v));
  return t;
}

// Three steps from p = {1, -2} with the gradients {0.5, 0}, {-0.25, 1}, {1, -0.5}, checked
// against values worked out by hand from PyTorch's rule (lr 0.1, weight decay 0.01).
void expect_three_steps(const SGDOptions& options,
                        const std::vector<std::vector<double>>& expected) {
  Var<double> p(vec({1, -2}), true);
  Var<double> frozen(vec({3}), true);  // never gets a gradient: skipped
  SGD<double> sgd({p, frozen}, options);
  const std::vector<std::vector<double>> grads = {{0.5, 0}, {-0.25, 1}, {1, -0.5}};
  for (std::size_t s = 0; s < 3; ++s) {
    sgd.zero_grad();
    EXPECT_FALSE(p.has_grad());
    p.accumulate_grad(vec(grads[s]));
    sgd.step();
    const auto v = p.value().local().to_vector();
    EXPECT_NEAR(v[0], expected[s][0], 1e-14) << "step " << s + 1;
    EXPECT_NEAR(v[1], expected[s][1], 1e-14) << "step " << s + 1;
    // The gradient itself is left as it was (PyTorch's updates are out of place).
    EXPECT_EQ(p.grad().local().to_vector(), grads[s]);
  }
  EXPECT_EQ(frozen.value().local().to_vector(), std::vector<double>{3});
}

TEST(Sgd, PlainSteps) {
  // p -= 0.1 g
  expect_three_steps({.lr = 0.1}, {{0.95, -2.0}, {0.975, -2.1}, {0.875, -2.05}});
}

TEST(Sgd, MomentumDampeningAndWeightDecay) {
  // step 1: g = 0.5 + 0.01 * 1 = 0.51, buf = g, p = 1 - 0.051 = 0.949
  // step 2: g = -0.25 + 0.00949 = -0.24051, buf = 0.9 * 0.51 + 0.9 * g = 0.242541,
  //         p = 0.949 - 0.0242541 = 0.9247459
  // step 3: g = 1.009247459, buf = 0.9 * 0.242541 + 0.9 * g = 1.1266096131,
  //         p = 0.9247459 - 0.11266096131 = 0.81208493869
  expect_three_steps({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
                     {{0.949, -1.998}, {0.9247459, -2.0844018}, {0.81208493869, -2.11528745838}});
}

TEST(Sgd, Nesterov) {
  // step 1: g = 0.51, buf = 0.51, g += 0.9 buf -> 0.969, p = 0.9031
  // step 2: g = -0.240969, buf = 0.459 + g = 0.218031, g += 0.9 buf -> -0.0447411,
  //         p = 0.90757411
  // step 3: g = 1.0090757411, buf = 1.2053036411, g -> 2.09384901809, p = 0.698189208191
  expect_three_steps(
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
      {{0.9031, -1.9962}, {0.90757411, -2.18078722}, {0.698189208191, -2.159568802282}});
}

TEST(Sgd, FloatParameters) {
  DistTensor<float> t(distop::TensorSpace(distop::Shape{2}, distop::Partition::self()));
  t.local().copy_from(distop::Tensor<float>::from_vector(distop::Shape{2}, {1, 2}));
  Var<float> p(t, true);
  p.grad().local().fill(1.0f);
  SGD<float> sgd({p}, {.lr = 0.5, .momentum = 0.5});
  sgd.step();
  sgd.step();  // buf = 0.5 * 1 + 1 = 1.5
  EXPECT_EQ(p.value().local().to_vector(), (std::vector<float>{-0.25f, 0.75f}));
}

TEST(Sgd, BadOptionsAreErrors) {
  Var<double> p(vec({1}), true);
  EXPECT_THROW(SGD<double>({p}, {.lr = -1}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .momentum = -0.5}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .nesterov = true}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               distop::Error);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(SGD<double>({p}, {.lr = inf}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = nan}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .momentum = inf}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .dampening = nan}), distop::Error);
  EXPECT_THROW(SGD<double>({p}, {.lr = 0.1, .weight_decay = inf}), distop::Error);
  SGD<double> sgd({p}, {.lr = 0.1});
  EXPECT_THROW(sgd.set_lr(-0.1), distop::Error);
  EXPECT_THROW(sgd.set_lr(inf), distop::Error);
  EXPECT_EQ(sgd.options().lr, 0.1);
  sgd.set_lr(0.2);
  EXPECT_EQ(sgd.options().lr, 0.2);
  EXPECT_EQ(sgd.lr(0), 0.2);
}

TEST(Sgd, DefaultsAreTorchs) {
  Var<double> p(vec({1}), true);
  SGD<double> sgd({p});
  EXPECT_EQ(sgd.name(), "SGD");
  EXPECT_EQ(sgd.group_options(0), (distop::optim::Hyperparameters{{"lr", 1e-3},
                                                                  {"momentum", 0},
                                                                  {"dampening", 0},
                                                                  {"weight_decay", 0},
                                                                  {"nesterov", 0},
                                                                  {"maximize", 0}}));
}

TEST(Sgd, MomentumBuffersInTheStateDict) {
  Var<double> p(vec({1, -2}), true);
  Var<double> frozen(vec({3}), true);
  SGD<double> sgd({p, frozen}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(sgd.state_keys(0).tensors, std::vector<std::string>{"momentum_buffer"});
  auto none = sgd.state_dict();
  ASSERT_EQ(none.params.size(), 2u);
  EXPECT_TRUE(none.params[0].empty());
  EXPECT_TRUE(none.params[1].empty());

  p.accumulate_grad(vec({0.5, 1}));
  sgd.step();
  auto state = sgd.state_dict();
  ASSERT_EQ(state.params[0].tensors.count("momentum_buffer"), 1u);
  EXPECT_TRUE(state.params[0].scalars.empty());  // torch's SGD keeps no step count
  EXPECT_TRUE(state.params[1].empty());          // no gradient yet: no buffer, as in PyTorch
  EXPECT_EQ(state.params[0].tensors.at("momentum_buffer").to_vector(),
            (std::vector<double>{0.5, 1}));
  // A deep copy: changing it leaves the optimizer alone.
  state.params[0].tensors.at("momentum_buffer").fill(7);
  EXPECT_EQ(sgd.state_dict().params[0].tensors.at("momentum_buffer").to_vector(),
            (std::vector<double>{0.5, 1}));

  // Clearing a buffer: the next step starts it from the gradient again, as a fresh optimizer.
  Var<double> q(p.value().clone(), true);
  SGD<double> fresh({q, Var<double>(vec({3}), true)}, {.lr = 0.1, .momentum = 0.9});
  auto cleared = sgd.state_dict();
  cleared.params[0] = {};
  sgd.load_state_dict(cleared);
  EXPECT_TRUE(sgd.state_dict().params[0].empty());
  p.zero_grad();
  p.accumulate_grad(vec({-1, 2}));
  q.accumulate_grad(vec({-1, 2}));
  sgd.step();
  fresh.step();
  EXPECT_EQ(q.value().local().to_vector(), p.value().local().to_vector());
}

TEST(Sgd, WithoutMomentumThereIsNoState) {
  Var<double> p(vec({1, -2}), true);
  SGD<double> sgd({p}, {.lr = 0.1});
  p.accumulate_grad(vec({0.5, 1}));
  sgd.step();
  EXPECT_TRUE(sgd.state_keys(0).tensors.empty());
  EXPECT_TRUE(sgd.state_dict().params[0].empty());
  // A buffer where the options keep none is an error.
  auto state = sgd.state_dict();
  state.params[0].tensors.emplace("momentum_buffer", distop::Tensor<double>(distop::Shape{2}));
  EXPECT_THROW(sgd.load_state_dict(state), distop::Error);
}

}  // namespace
