// The optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) against scalar reference loops written in
// double from torch.optim's definitions: the first steps of every combination of the options that
// change the update, in float and double; parameter groups; parameters without gradients;
// state_dict round trips; load_state_dict's errors; option checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "distop/dist/dist_tensor.hpp"
#include "distop/optim/adagrad.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/rmsprop.hpp"
#include "distop/optim/sgd.hpp"

namespace {

using distop::DistTensor;
using distop::Shape;
using distop::Tensor;
using distop::Var;
namespace optim = distop::optim;

using Trajectory = std::vector<std::vector<double>>;  // the parameter after each step

constexpr int kSteps = 5;
const std::vector<double> kInitial = {0.5, -1.25, 2.0, 0.0};
// Gradients of each step: zeros (a zero second moment at the first step, a falling one later, so
// that AMSGrad's maximum matters), sign changes, small and large entries.
const std::vector<std::vector<double>> kGrads = {{0.8, 0.0, -1.5, 0.3},
                                                 {-0.4, 1.1, -0.2, 0.3},
                                                 {0.05, -0.9, 0.0, -0.6},
                                                 {1.2, 0.02, 0.7, -0.01},
                                                 {-0.3, 0.5, -2.0, 0.25}};

template <class T>
DistTensor<T> vec(const std::vector<double>& v) {
  DistTensor<T> t(
      distop::TensorSpace(Shape{static_cast<std::int64_t>(v.size())}, distop::Partition::self()));
  std::vector<T> c(v.begin(), v.end());
  t.local().copy_from(Tensor<T>::from_vector(t.space().local_shape(), c));
  return t;
}

template <class T>
std::vector<double> values(const Var<T>& p) {
  const auto v = p.value().local().to_vector();
  return {v.begin(), v.end()};
}

// ---- The references: torch's definitions, one entry at a time, in double. ----

Trajectory reference_sgd(const optim::SGDOptions& o, int steps) {
  std::vector<double> p = kInitial, buf(p.size());
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < p.size(); ++k) {
      double g = o.maximize ? -kGrads[s][k] : kGrads[s][k];
      g += o.weight_decay * p[k];
      if (o.momentum != 0) {
        buf[k] = s == 0 ? g : o.momentum * buf[k] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[k] : buf[k];
      }
      p[k] -= o.lr * g;
    }
    out.push_back(p);
  }
  return out;
}

template <class Options>
Trajectory reference_adam(const Options& o, bool decoupled, int steps) {
  const double b1 = o.betas[0], b2 = o.betas[1];
  std::vector<double> p = kInitial, m(p.size()), v(p.size()), vmax(p.size());
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    const double t = s + 1;
    for (std::size_t k = 0; k < p.size(); ++k) {
      double g = o.maximize ? -kGrads[s][k] : kGrads[s][k];
      if (decoupled)
        p[k] *= 1 - o.lr * o.weight_decay;
      else
        g += o.weight_decay * p[k];
      m[k] = b1 * m[k] + (1 - b1) * g;
      v[k] = b2 * v[k] + (1 - b2) * g * g;
      vmax[k] = std::max(vmax[k], v[k]);
      const double second = o.amsgrad ? vmax[k] : v[k];
      const double m_hat = m[k] / (1 - std::pow(b1, t));
      const double v_hat_sqrt = std::sqrt(second) / std::sqrt(1 - std::pow(b2, t));
      p[k] -= o.lr * m_hat / (v_hat_sqrt + o.eps);
    }
    out.push_back(p);
  }
  return out;
}

Trajectory reference_rmsprop(const optim::RMSpropOptions& o, int steps) {
  std::vector<double> p = kInitial, v(p.size()), a(p.size()), buf(p.size());
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < p.size(); ++k) {
      double g = o.maximize ? -kGrads[s][k] : kGrads[s][k];
      g += o.weight_decay * p[k];
      v[k] = o.alpha * v[k] + (1 - o.alpha) * g * g;
      a[k] = o.alpha * a[k] + (1 - o.alpha) * g;
      const double d = std::sqrt(o.centered ? v[k] - a[k] * a[k] : v[k]) + o.eps;
      if (o.momentum > 0) {
        buf[k] = o.momentum * buf[k] + g / d;
        p[k] -= o.lr * buf[k];
      } else {
        p[k] -= o.lr * g / d;
      }
    }
    out.push_back(p);
  }
  return out;
}

Trajectory reference_adagrad(const optim::AdagradOptions& o, int steps) {
  std::vector<double> p = kInitial, sum(p.size(), o.initial_accumulator_value);
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    const double clr = o.lr / (1 + s * o.lr_decay);
    for (std::size_t k = 0; k < p.size(); ++k) {
      double g = o.maximize ? -kGrads[s][k] : kGrads[s][k];
      g += o.weight_decay * p[k];
      sum[k] += g * g;
      p[k] -= clr * g / (std::sqrt(sum[k]) + o.eps);
    }
    out.push_back(p);
  }
  return out;
}

// ---- Running the optimizers. ----

std::string describe(const optim::Hyperparameters& h) {
  std::ostringstream os;
  for (const auto& [key, value] : h) os << key << "=" << value << " ";
  return os.str();
}

// Float rounding: each step rounds the parameter and the update to T (parameters are O(1)).
template <class T>
void expect_close(const Trajectory& got, const Trajectory& want) {
  const double unit = std::is_same_v<T, float> ? 4e-6 : 1e-13;
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t s = 0; s < got.size(); ++s)
    for (std::size_t k = 0; k < got[s].size(); ++k)
      EXPECT_NEAR(got[s][k], want[s][k], unit * std::max(1.0, std::abs(want[s][k])))
          << "step " << s + 1 << ", entry " << k;
}

// Runs Opt from kInitial with kGrads on one parameter, beside a parameter that never gets a
// gradient (skipped: neither it nor its state changes), and checks that the gradients are left as
// they were (torch's updates are out of place).
template <class T, template <class> class Opt>
Trajectory run(const typename Opt<T>::Options& o, int steps = kSteps) {
  Var<T> p(vec<T>(kInitial), true);
  Var<T> frozen(vec<T>({3, -4}), true);
  Opt<T> opt({p, frozen}, o);
  const auto frozen_state = opt.state_dict().params[1];
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    const auto& grad = kGrads[static_cast<std::size_t>(s)];
    opt.zero_grad();
    EXPECT_FALSE(p.has_grad());
    p.accumulate_grad(vec<T>(grad));
    opt.step();
    out.push_back(values(p));
    const auto g = p.grad().local().to_vector();
    for (std::size_t k = 0; k < g.size(); ++k)
      EXPECT_EQ(g[k], static_cast<T>(grad[k])) << "the step changed the gradient";
  }
  EXPECT_EQ(values(frozen), (std::vector<double>{3, -4}));
  const auto after = opt.state_dict().params[1];
  EXPECT_EQ(after.scalars, frozen_state.scalars);
  EXPECT_EQ(after.tensors.size(), frozen_state.tensors.size());
  return out;
}

template <template <class> class Opt, class Reference>
void expect_matches(const typename Opt<double>::Options& o, const Reference& reference) {
  Var<double> probe(vec<double>({0}), true);
  SCOPED_TRACE(Opt<double>({probe}, o).name() + " " +
               describe(Opt<double>({probe}, o).group_options(0)));
  const Trajectory want = reference(o, kSteps);
  {
    SCOPED_TRACE("double");
    expect_close<double>(run<double, Opt>(o), want);
  }
  {
    SCOPED_TRACE("float");
    typename Opt<float>::Options of = o;
    expect_close<float>(run<float, Opt>(of), want);
  }
}

TEST(Optimizers, SgdMatchesTorchForEveryOptionCombination) {
  int combinations = 0;
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.3})
      for (bool nesterov : {false, true})
        for (double weight_decay : {0.0, 0.05})
          for (bool maximize : {false, true}) {
            if (momentum == 0 && (dampening != 0 || nesterov)) continue;
            if (nesterov && dampening != 0) continue;
            const optim::SGDOptions o{.lr = 0.1,
                                      .momentum = momentum,
                                      .dampening = dampening,
                                      .weight_decay = weight_decay,
                                      .nesterov = nesterov,
                                      .maximize = maximize};
            expect_matches<optim::SGD>(o, reference_sgd);
            ++combinations;
          }
  EXPECT_EQ(combinations, 16);
}

template <template <class> class Opt, bool kDecoupled>
void expect_adam_family() {
  int combinations = 0;
  // Torch's betas and eps, and others for which the lerp takes its other branch (1 - beta1 > 0.5)
  // and eps is large enough to matter in float.
  const std::vector<std::pair<std::array<double, 2>, double>> betas_eps = {{{0.9, 0.999}, 1e-8},
                                                                           {{0.3, 0.5}, 1e-3}};
  for (const auto& [betas, eps] : betas_eps)
    for (bool amsgrad : {false, true})
      for (double weight_decay : {0.0, 0.1})
        for (bool maximize : {false, true}) {
          typename Opt<double>::Options o;
          o.lr = 0.1;
          o.betas = betas;
          o.eps = eps;
          o.weight_decay = weight_decay;
          o.amsgrad = amsgrad;
          o.maximize = maximize;
          expect_matches<Opt>(o, [](const auto& options, int steps) {
            return reference_adam(options, kDecoupled, steps);
          });
          ++combinations;
        }
  EXPECT_EQ(combinations, 16);
}

TEST(Optimizers, AdamMatchesTorchForEveryOptionCombination) {
  expect_adam_family<optim::Adam, false>();
}

TEST(Optimizers, AdamWMatchesTorchForEveryOptionCombination) {
  expect_adam_family<optim::AdamW, true>();
}

TEST(Optimizers, RmspropMatchesTorchForEveryOptionCombination) {
  int combinations = 0;
  for (double alpha : {0.99, 0.4})  // 0.4: the lerp of the centered average takes its other branch
    for (bool centered : {false, true})
      for (double momentum : {0.0, 0.8})
        for (double weight_decay : {0.0, 0.1})
          for (bool maximize : {false, true}) {
            const optim::RMSpropOptions o{.lr = 0.01,
                                          .alpha = alpha,
                                          .eps = 1e-6,
                                          .weight_decay = weight_decay,
                                          .momentum = momentum,
                                          .centered = centered,
                                          .maximize = maximize};
            expect_matches<optim::RMSprop>(o, reference_rmsprop);
            ++combinations;
          }
  EXPECT_EQ(combinations, 32);
}

TEST(Optimizers, AdagradMatchesTorchForEveryOptionCombination) {
  int combinations = 0;
  for (double lr_decay : {0.0, 0.1})
    for (double initial : {0.0, 0.5})
      for (double weight_decay : {0.0, 0.1})
        for (bool maximize : {false, true}) {
          const optim::AdagradOptions o{.lr = 0.1,
                                        .lr_decay = lr_decay,
                                        .weight_decay = weight_decay,
                                        .initial_accumulator_value = initial,
                                        .eps = 1e-10,
                                        .maximize = maximize};
          expect_matches<optim::Adagrad>(o, reference_adagrad);
          ++combinations;
        }
  EXPECT_EQ(combinations, 16);
}

// The references themselves: every option the tests vary changes the trajectory, so a rule that
// ignored one would fail above.
TEST(Optimizers, EveryVariedOptionChangesTheReference) {
  const auto differ = [](const Trajectory& a, const Trajectory& b) { return a != b; };
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  EXPECT_TRUE(differ(reference_sgd(sgd, kSteps), reference_sgd({.lr = 0.1}, kSteps)));
  EXPECT_TRUE(differ(reference_sgd(sgd, kSteps),
                     reference_sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.3}, kSteps)));
  EXPECT_TRUE(differ(reference_sgd(sgd, kSteps),
                     reference_sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}, kSteps)));
  for (const std::array<double, 2> betas : {std::array<double, 2>{0.9, 0.999}, {0.3, 0.5}}) {
    const optim::AdamOptions adam{.lr = 0.1, .betas = betas};
    optim::AdamOptions ams = adam;
    ams.amsgrad = true;
    EXPECT_TRUE(differ(reference_adam(adam, false, kSteps), reference_adam(ams, false, kSteps)));
    optim::AdamOptions decay = adam;
    decay.weight_decay = 0.1;
    EXPECT_TRUE(differ(reference_adam(decay, false, kSteps), reference_adam(decay, true, kSteps)));
  }
  const optim::RMSpropOptions rms{.lr = 0.01};
  EXPECT_TRUE(differ(reference_rmsprop(rms, kSteps),
                     reference_rmsprop({.lr = 0.01, .centered = true}, kSteps)));
  const optim::AdagradOptions ada{.lr = 0.1};
  EXPECT_TRUE(differ(reference_adagrad(ada, kSteps),
                     reference_adagrad({.lr = 0.1, .lr_decay = 0.1}, kSteps)));
  EXPECT_TRUE(differ(reference_adagrad(ada, kSteps),
                     reference_adagrad({.lr = 0.1, .initial_accumulator_value = 0.5}, kSteps)));
}

TEST(Optimizers, DefaultsAreTorchs) {
  Var<double> p(vec<double>({1}), true);
  EXPECT_EQ(optim::Adam<double>({p}).group_options(0), (optim::Hyperparameters{{"lr", 1e-3},
                                                                               {"beta1", 0.9},
                                                                               {"beta2", 0.999},
                                                                               {"eps", 1e-8},
                                                                               {"weight_decay", 0},
                                                                               {"amsgrad", 0},
                                                                               {"maximize", 0}}));
  EXPECT_EQ(optim::AdamW<double>({p}).group_options(0).at("weight_decay"), 1e-2);
  EXPECT_EQ(optim::RMSprop<double>({p}).group_options(0),
            (optim::Hyperparameters{{"lr", 1e-2},
                                    {"alpha", 0.99},
                                    {"eps", 1e-8},
                                    {"weight_decay", 0},
                                    {"momentum", 0},
                                    {"centered", 0},
                                    {"maximize", 0}}));
  EXPECT_EQ(optim::Adagrad<double>({p}).group_options(0),
            (optim::Hyperparameters{{"lr", 1e-2},
                                    {"lr_decay", 0},
                                    {"weight_decay", 0},
                                    {"initial_accumulator_value", 0},
                                    {"eps", 1e-10},
                                    {"maximize", 0}}));
  EXPECT_EQ(optim::Adam<double>({p}).name(), "Adam");
  EXPECT_EQ(optim::AdamW<double>({p}).name(), "AdamW");
  EXPECT_EQ(optim::RMSprop<double>({p}).name(), "RMSprop");
  EXPECT_EQ(optim::Adagrad<double>({p}).name(), "Adagrad");
}

TEST(Optimizers, StateKeysFollowTheOptions) {
  Var<double> p(vec<double>({1}), true);
  using Keys = std::vector<std::string>;
  EXPECT_EQ(optim::Adam<double>({p}).state_keys(0).tensors, (Keys{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(optim::Adam<double>({p}, {.amsgrad = true}).state_keys(0).tensors,
            (Keys{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  EXPECT_EQ(optim::Adam<double>({p}).state_keys(0).scalars, Keys{"step"});
  EXPECT_EQ(optim::RMSprop<double>({p}, {.momentum = 0.5, .centered = true}).state_keys(0).tensors,
            (Keys{"square_avg", "momentum_buffer", "grad_avg"}));
  EXPECT_EQ(optim::Adagrad<double>({p}).state_keys(0).tensors, Keys{"sum"});
  // Adagrad's state exists from the start, as torch's.
  optim::Adagrad<double> adagrad({p}, {.initial_accumulator_value = 0.25});
  const auto state = adagrad.state_dict();
  EXPECT_EQ(state.params[0].tensors.at("sum").to_vector(), std::vector<double>{0.25});
  EXPECT_EQ(state.params[0].scalars.at("step"), 0);
}

// ---- Parameter groups. ----

// Two groups with different options, each parameter checked against its group's reference.
template <template <class> class Opt, class Reference>
void expect_groups(const typename Opt<double>::Options& a, const typename Opt<double>::Options& b,
                   const Reference& reference) {
  Var<double> p(vec<double>(kInitial), true), q(vec<double>(kInitial), true),
      r(vec<double>(kInitial), true);
  using Group = typename Opt<double>::Group;
  Opt<double> opt(std::vector<Group>{{{p, q}, a}, {{r}, b}});
  EXPECT_EQ(opt.group_count(), 2u);
  EXPECT_EQ(opt.parameter_count(), 3u);
  EXPECT_EQ(opt.group_of(2), 1u);
  EXPECT_TRUE(opt.group_parameters(1)[0].same_as(r));
  EXPECT_EQ(opt.lr(0), a.lr);
  EXPECT_EQ(opt.lr(1), b.lr);
  Trajectory tp, tr;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (auto* v : {&p, &q, &r})
      v->accumulate_grad(vec<double>(kGrads[static_cast<std::size_t>(s)]));
    opt.step();
    tp.push_back(values(p));
    tr.push_back(values(r));
  }
  EXPECT_EQ(values(p), values(q));
  expect_close<double>(tp, reference(a, kSteps));
  expect_close<double>(tr, reference(b, kSteps));
}

TEST(Optimizers, GroupsHaveTheirOwnOptions) {
  expect_groups<optim::SGD>({.lr = 0.1, .momentum = 0.9},
                            {.lr = 0.02, .weight_decay = 0.1, .maximize = true}, reference_sgd);
  expect_groups<optim::Adam>({.lr = 0.1, .amsgrad = true}, {.lr = 0.01, .weight_decay = 0.1},
                             [](const auto& o, int n) { return reference_adam(o, false, n); });
  expect_groups<optim::AdamW>({.lr = 0.1}, {.lr = 0.01, .weight_decay = 0.5, .maximize = true},
                              [](const auto& o, int n) { return reference_adam(o, true, n); });
  expect_groups<optim::RMSprop>({.lr = 0.01, .centered = true}, {.lr = 0.05, .momentum = 0.5},
                                reference_rmsprop);
  expect_groups<optim::Adagrad>({.lr = 0.1, .lr_decay = 0.1},
                                {.lr = 0.3, .initial_accumulator_value = 1}, reference_adagrad);
}

TEST(Optimizers, SetLrIsPerGroupOrForAll) {
  Var<double> p(vec<double>({1}), true), q(vec<double>({1}), true);
  using Group = optim::Adam<double>::Group;
  optim::Adam<double> opt(std::vector<Group>{{{p}, {.lr = 0.1}}, {{q}, {.lr = 0.2}}});
  opt.set_lr(1, 0.5);
  EXPECT_EQ(opt.lr(0), 0.1);
  EXPECT_EQ(opt.lr(1), 0.5);
  EXPECT_EQ(opt.options(1).lr, 0.5);
  opt.set_lr(0.3);
  EXPECT_EQ(opt.lr(0), 0.3);
  EXPECT_EQ(opt.lr(1), 0.3);
  EXPECT_THROW(opt.set_lr(-1.0), distop::Error);
  EXPECT_EQ(opt.lr(0), 0.3);
  EXPECT_THROW(opt.set_lr(2, 0.1), distop::Error);
  EXPECT_THROW((void)opt.lr(2), distop::Error);
  EXPECT_THROW((void)opt.group_parameters(2), distop::Error);
}

TEST(Optimizers, AParameterTwiceIsAnError) {
  Var<double> p(vec<double>({1}), true), q(vec<double>({1}), true);
  EXPECT_THROW(optim::SGD<double>({p, q, p}), distop::Error);
  using Group = optim::Adam<double>::Group;
  EXPECT_THROW(optim::Adam<double>(std::vector<Group>{{{p}, {}}, {{q, p}, {}}}), distop::Error);
  EXPECT_THROW(optim::Adam<double>({p, Var<double>()}), distop::Error);
}

TEST(Optimizers, ZeroGradForgetsEveryGradient) {
  Var<double> p(vec<double>({1}), true), q(vec<double>({1}), true);
  using Group = optim::RMSprop<double>::Group;
  optim::RMSprop<double> opt(std::vector<Group>{{{p}, {}}, {{q}, {}}});
  p.accumulate_grad(vec<double>({1}));
  q.accumulate_grad(vec<double>({1}));
  opt.zero_grad();
  EXPECT_FALSE(p.has_grad());
  EXPECT_FALSE(q.has_grad());
}

// ---- Option checks. ----

// Expects constructing with `o` to throw an Error naming `option`.
template <template <class> class Opt>
void expect_bad(const typename Opt<double>::Options& o, const std::string& option) {
  Var<double> p(vec<double>({1}), true);
  try {
    Opt<double> opt({p}, o);
    ADD_FAILURE() << "no error for a bad " << option;
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
  }
}

TEST(Optimizers, InvalidOptionsAreErrorsNamingTheOption) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_bad<optim::Adam>({.lr = -1}, "lr");
  expect_bad<optim::Adam>({.lr = nan}, "lr");
  expect_bad<optim::Adam>({.betas = {1.0, 0.999}}, "beta1");
  expect_bad<optim::Adam>({.betas = {-0.1, 0.999}}, "beta1");
  expect_bad<optim::Adam>({.betas = {0.9, 1.5}}, "beta2");
  expect_bad<optim::Adam>({.eps = -1e-8}, "eps");
  expect_bad<optim::Adam>({.weight_decay = -0.1}, "weight_decay");
  expect_bad<optim::AdamW>({.betas = {0.9, nan}}, "beta2");
  expect_bad<optim::AdamW>({.weight_decay = inf}, "weight_decay");
  expect_bad<optim::RMSprop>({.alpha = -0.5}, "alpha");
  expect_bad<optim::RMSprop>({.eps = -1}, "eps");
  expect_bad<optim::RMSprop>({.momentum = -0.9}, "momentum");
  expect_bad<optim::RMSprop>({.weight_decay = -1}, "weight_decay");
  expect_bad<optim::RMSprop>({.lr = inf}, "lr");
  expect_bad<optim::Adagrad>({.lr_decay = -1}, "lr_decay");
  expect_bad<optim::Adagrad>({.initial_accumulator_value = -1}, "initial_accumulator_value");
  expect_bad<optim::Adagrad>({.eps = nan}, "eps");
  expect_bad<optim::Adagrad>({.weight_decay = -1}, "weight_decay");
  expect_bad<optim::SGD>({.momentum = 0, .nesterov = true}, "nesterov");
  // In a group, the group is named too.
  Var<double> p(vec<double>({1}), true), q(vec<double>({1}), true);
  using Group = optim::Adam<double>::Group;
  try {
    optim::Adam<double> opt(std::vector<Group>{{{p}, {}}, {{q}, {.eps = -1}}});
    ADD_FAILURE() << "no error";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter group 1"), std::string::npos) << e.what();
  }
}

// ---- state_dict and load_state_dict. ----

// Steps `opt` with kGrads[first..last) on every parameter of `params`.
template <class T>
void steps(optim::Optimizer<T>& opt, const std::vector<Var<T>>& params, int first, int last) {
  for (int s = first; s < last; ++s) {
    opt.zero_grad();
    for (const auto& p : params) p.accumulate_grad(vec<T>(kGrads[static_cast<std::size_t>(s)]));
    opt.step();
  }
}

template <class T>
std::vector<std::vector<T>> flat_state(const optim::OptimizerState<T>& s) {
  std::vector<std::vector<T>> out;
  for (const auto& p : s.params) {
    for (const auto& [key, t] : p.tensors) out.push_back(t.to_vector());
    for (const auto& [key, v] : p.scalars) out.push_back({static_cast<T>(v)});
  }
  return out;
}

// A fresh optimizer with other options, loaded with another's state after 3 steps, continues
// bit for bit as the original does.
template <template <class> class Opt, class T>
void expect_round_trip(const typename Opt<T>::Options& options,
                       const typename Opt<T>::Options& other) {
  Var<T> p(vec<T>(kInitial), true), frozen(vec<T>({1, 2}), true);
  using Group = typename Opt<T>::Group;
  Opt<T> a(std::vector<Group>{{{p}, options}, {{frozen}, options}});
  steps<T>(a, {p}, 0, 3);

  Var<T> q(p.value().clone(), true), frozen2(vec<T>({1, 2}), true);
  Opt<T> b(std::vector<Group>{{{q}, other}, {{frozen2}, other}});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.group_options(0), a.group_options(0));
  EXPECT_EQ(flat_state(b.state_dict()), flat_state(a.state_dict()));
  steps<T>(a, {p}, 3, kSteps);
  steps<T>(b, {q}, 3, kSteps);
  EXPECT_EQ(values(q), values(p));
  EXPECT_EQ(flat_state(b.state_dict()), flat_state(a.state_dict()));
}

TEST(Optimizers, StateDictRoundTripsBitForBit) {
  expect_round_trip<optim::SGD, float>({.lr = 0.1, .momentum = 0.9, .nesterov = true}, {});
  expect_round_trip<optim::Adam, float>({.lr = 0.1, .amsgrad = true}, {.lr = 0.5});
  expect_round_trip<optim::AdamW, double>({.lr = 0.1, .betas = {0.5, 0.9}}, {});
  expect_round_trip<optim::RMSprop, float>({.lr = 0.01, .momentum = 0.5, .centered = true}, {});
  expect_round_trip<optim::Adagrad, double>({.lr = 0.1, .lr_decay = 0.2}, {.lr = 1});
}

TEST(Optimizers, StateDictIsADeepCopy) {
  Var<double> p(vec<double>(kInitial), true);
  optim::Adam<double> opt({p}, {.lr = 0.1});
  steps<double>(opt, {p}, 0, 2);
  auto state = opt.state_dict();
  const auto before = state.params[0].tensors.at("exp_avg").to_vector();
  state.params[0].tensors.at("exp_avg").fill(9);
  state.params[0].scalars.at("step") = 7;
  EXPECT_EQ(opt.state_dict().params[0].tensors.at("exp_avg").to_vector(), before);
  EXPECT_EQ(opt.state_dict().params[0].scalars.at("step"), 2);
  // And load_state_dict copies: changing the source afterwards changes nothing.
  optim::Adam<double> other({Var<double>(vec<double>(kInitial), true)});
  other.load_state_dict(state);
  state.params[0].tensors.at("exp_avg").fill(1);
  EXPECT_EQ(other.state_dict().params[0].tensors.at("exp_avg").to_vector(),
            std::vector<double>(kInitial.size(), 9));
}

// Expects load_state_dict(bad) to throw an Error mentioning `what` and to change nothing.
template <class T>
void expect_load_error(optim::Optimizer<T>& opt, const optim::OptimizerState<T>& bad,
                       const std::string& what) {
  const auto before = opt.state_dict();
  try {
    opt.load_state_dict(bad);
    ADD_FAILURE() << "load_state_dict did not throw (expected: " << what << ")";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt.check_state_dict(bad), distop::Error);
  const auto after = opt.state_dict();
  EXPECT_EQ(after.groups, before.groups);
  EXPECT_EQ(flat_state(after), flat_state(before));
}

TEST(Optimizers, BadStateDictsAreErrorsAndChangeNothing) {
  Var<double> p(vec<double>(kInitial), true), q(vec<double>({1, 2}), true);
  using Group = optim::Adam<double>::Group;
  optim::Adam<double> adam(std::vector<Group>{{{p}, {.lr = 0.1}}, {{q}, {.lr = 0.2}}});
  steps<double>(adam, {p}, 0, 2);
  const auto good = adam.state_dict();
  adam.check_state_dict(good);

  Var<double> r(vec<double>(kInitial), true);
  optim::SGD<double> sgd({r}, {.lr = 0.1, .momentum = 0.9});
  steps<double>(sgd, {r}, 0, 1);
  expect_load_error(adam, optim::OptimizerState<double>{sgd.state_dict()},
                    "of optimizer SGD, which cannot be loaded into optimizer Adam");

  auto bad = good;
  bad.groups.pop_back();
  expect_load_error(adam, bad, "1 parameter groups");

  bad = good;
  bad.params.pop_back();
  expect_load_error(adam, bad, "1 parameters");

  bad = good;
  bad.params[0].tensors.at("exp_avg") = Tensor<double>(Shape{3});
  expect_load_error(adam, bad, "has shape [3]");

  bad = good;
  bad.params[0].tensors.erase("exp_avg_sq");
  expect_load_error(adam, bad, "expected tensors");

  bad = good;
  bad.params[0].scalars.at("step") = 1.5;
  expect_load_error(adam, bad, "whole number");

  bad = good;
  bad.groups[1].erase("eps");
  expect_load_error(adam, bad, "has no option 'eps'");

  bad = good;
  bad.groups[0]["momentum"] = 0.9;
  expect_load_error(adam, bad, "option 'momentum'");

  bad = good;
  bad.groups[0]["beta1"] = 1;
  expect_load_error(adam, bad, "beta1");

  bad = good;
  bad.groups[0]["amsgrad"] = 0.5;
  expect_load_error(adam, bad, "boolean");

  // amsgrad on: the state must then have max_exp_avg_sq too.
  bad = good;
  bad.groups[0]["amsgrad"] = 1;
  expect_load_error(adam, bad, "max_exp_avg_sq");

  // Adagrad keeps state for every parameter from the start.
  optim::Adagrad<double> adagrad({r});
  auto empty = adagrad.state_dict();
  empty.params[0] = {};
  expect_load_error(adagrad, empty, "has no state");

  // And the good state loads.
  adam.load_state_dict(good);
}

}  // namespace
