// Optimizer options out of range: what torch.optim refuses is an Error naming the option, at
// construction, in set_lr and in load_state_dict (and then changes nothing); what torch accepts but
// cannot be meant (SGD's momentum above 1, ...) is a warning on stderr, once per process. The
// training flags (train::check_options) are refused naming the flag and its value.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/optim/adagrad.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/rmsprop.hpp"
#include "distop/optim/sgd.hpp"
#include "distop/train/options.hpp"

namespace optim = distop::optim;
using distop::DistTensor;
using distop::Shape;
using distop::Tensor;
using distop::Var;

namespace {

Var<double> parameter() {
  DistTensor<double> t(distop::TensorSpace(Shape{2}, distop::Partition::self()));
  t.local().copy_from(Tensor<double>::from_vector(Shape{2}, {0.5, -1.0}));
  return Var<double>(t, true);
}

// The message of the distop::Error that f throws ("" and a failure if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const distop::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

template <template <class> class Opt>
void expect_refused(const typename Opt<double>::Options& o, const std::string& option) {
  SCOPED_TRACE(option);
  const std::string m = error_of([&] { Opt<double> opt({parameter()}, o); });
  EXPECT_NE(m.find("option " + option), std::string::npos) << m;
}

// Each optimizer's lr: refused at construction, by set_lr (the lr left as it was) and by
// load_state_dict (the options left as they were).
template <template <class> class Opt>
void expect_lr_checked(typename Opt<double>::Options o) {
  SCOPED_TRACE(Opt<double>({parameter()}, o).name());
  const double good = o.lr;
  o.lr = -0.1;
  EXPECT_NE(error_of([&] { Opt<double> opt({parameter()}, o); }).find("learning rate"),
            std::string::npos);
  o.lr = good;
  Opt<double> opt({parameter()}, o);
  EXPECT_NE(error_of([&] { opt.set_lr(-1); }).find("learning rate"), std::string::npos);
  EXPECT_NE(
      error_of([&] { opt.set_lr(std::numeric_limits<double>::infinity()); }).find("learning rate"),
      std::string::npos);
  EXPECT_EQ(opt.lr(0), good);
  auto state = opt.state_dict();
  state.groups[0]["lr"] = -2;
  EXPECT_NE(error_of([&] { opt.load_state_dict(state); }).find("lr"), std::string::npos);
  EXPECT_EQ(opt.lr(0), good);
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(OptimizerRanges, WhatTorchRefusesIsAnErrorNamingTheOption) {
  expect_refused<optim::SGD>({.momentum = -0.5}, "momentum");
  expect_refused<optim::SGD>({.weight_decay = -1e-4}, "weight_decay");
  expect_refused<optim::SGD>({.dampening = std::numeric_limits<double>::quiet_NaN()}, "dampening");
  expect_refused<optim::SGD>({.momentum = 0.9, .dampening = 0.1, .nesterov = true}, "nesterov");
  for (const auto& betas : std::vector<std::array<double, 2>>{{1.0, 0.9}, {-0.1, 0.9}}) {
    expect_refused<optim::Adam>({.betas = betas}, "beta1");
    expect_refused<optim::AdamW>({.betas = betas}, "beta1");
    expect_refused<optim::Adam>({.betas = {betas[1], betas[0]}}, "beta2");
    expect_refused<optim::AdamW>({.betas = {betas[1], betas[0]}}, "beta2");
  }
  expect_refused<optim::Adam>({.eps = -1e-8}, "eps");
  expect_refused<optim::AdamW>({.eps = -1e-8}, "eps");
  expect_refused<optim::Adam>({.weight_decay = -0.1}, "weight_decay");
  expect_refused<optim::AdamW>({.weight_decay = -0.1}, "weight_decay");
  expect_refused<optim::RMSprop>({.alpha = -0.1}, "alpha");
  expect_refused<optim::RMSprop>({.eps = -1}, "eps");
  expect_refused<optim::RMSprop>({.weight_decay = -1}, "weight_decay");
  expect_refused<optim::RMSprop>({.momentum = -0.9}, "momentum");
  expect_refused<optim::Adagrad>({.lr_decay = -0.1}, "lr_decay");
  expect_refused<optim::Adagrad>({.weight_decay = -0.1}, "weight_decay");
  expect_refused<optim::Adagrad>({.initial_accumulator_value = -0.1}, "initial_accumulator_value");
  expect_refused<optim::Adagrad>({.eps = -1e-10}, "eps");
}

TEST(OptimizerRanges, EveryOptimizerChecksLrInSetLrAndLoadStateDict) {
  expect_lr_checked<optim::SGD>({.lr = 0.1, .momentum = 0.9});
  expect_lr_checked<optim::Adam>({.lr = 0.1});
  expect_lr_checked<optim::AdamW>({.lr = 0.1});
  expect_lr_checked<optim::RMSprop>({.lr = 0.1});
  expect_lr_checked<optim::Adagrad>({.lr = 0.1});
}

// A state_dict whose options torch would refuse is refused by load_state_dict, which then changes
// nothing.
TEST(OptimizerRanges, LoadStateDictRefusesOptionsOutOfRange) {
  optim::SGD<double> sgd({parameter()}, {.lr = 0.1, .momentum = 0.5});
  auto s = sgd.state_dict();
  s.groups[0]["momentum"] = -1;
  EXPECT_NE(error_of([&] { sgd.load_state_dict(s); }).find("momentum"), std::string::npos);
  EXPECT_EQ(sgd.options().momentum, 0.5);
  optim::Adagrad<double> adagrad({parameter()}, {.lr = 0.1});
  auto a = adagrad.state_dict();
  a.groups[0]["lr_decay"] = -1;
  EXPECT_NE(error_of([&] { adagrad.load_state_dict(a); }).find("lr_decay"), std::string::npos);
  EXPECT_EQ(adagrad.options().lr_decay, 0);
}

// Values torch accepts that cannot be meant: a warning naming the option and the value, once per
// process however often the options are checked (construction, every set_lr of a schedule,
// load_state_dict), and the optimizer works. These keys are warned of by no other test of this
// binary.
TEST(OptimizerRanges, WhatTorchAcceptsButCannotBeMeantIsWarnedOfOnce) {
  struct Case {
    std::function<void()> make;  // constructs, sets lr twice, loads its own state
    std::string warning;
  };
  auto exercise = [](auto& opt) {
    opt.set_lr(0.05);
    opt.set_lr(0.02);
    opt.load_state_dict(opt.state_dict());
  };
  const std::vector<Case> cases = {
      {[&] {
         optim::SGD<double> o({parameter()}, {.lr = 0.1, .momentum = 2});
         exercise(o);
       },
       "warning: SGD: option momentum is 2, above 1"},
      {[&] {
         optim::SGD<double> o({parameter()}, {.lr = 0.1, .momentum = 0.9, .dampening = 1.5});
         exercise(o);
       },
       "warning: SGD: option dampening is 1.5, outside [0, 1]"},
      {[&] {
         optim::RMSprop<double> o({parameter()}, {.lr = 0.1, .alpha = 1.5});
         exercise(o);
       },
       "warning: RMSprop: option alpha is 1.5, not below 1"},
      {[&] {
         optim::RMSprop<double> o({parameter()}, {.lr = 0.1, .momentum = 3});
         exercise(o);
       },
       "warning: RMSprop: option momentum is 3, above 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.warning);
    ::testing::internal::CaptureStderr();
    c.make();
    c.make();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, c.warning), 1u) << err;
    EXPECT_EQ(count(err, "warning:"), 1u) << err;
  }
  // In range, nothing.
  ::testing::internal::CaptureStderr();
  optim::SGD<double> fine({parameter()}, {.lr = 0.1, .momentum = 1, .dampening = 1});
  optim::RMSprop<double> also({parameter()}, {.lr = 0.1, .alpha = 0.9, .momentum = 1});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// The training flags: a value out of range is an Error naming the flag and the value, for every
// optimizer that has the flag.
TEST(OptimizerRanges, TrainingFlagsOutOfRangeAreErrorsNamingTheFlag) {
  using distop::train::TrainOptions;
  struct Case {
    std::vector<std::string> optimizers;
    std::function<void(TrainOptions&)> set;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"sgd", "rmsprop"}, [](TrainOptions& o) { o.momentum = -0.5; }, "--momentum -0.5"},
      {{"sgd", "adam", "adamw", "rmsprop", "adagrad"},
       [](TrainOptions& o) { o.weight_decay = -0.01; },
       "--weight-decay -0.01"},
      {{"adam", "adamw", "rmsprop", "adagrad"},
       [](TrainOptions& o) { o.eps = -1e-08; },
       "--eps -1e-08"},
      {{"rmsprop"}, [](TrainOptions& o) { o.alpha = -0.5; }, "--alpha -0.5"},
      {{"adam", "adamw"},
       [](TrainOptions& o) {
         o.betas = std::array<double, 2>{1, 0.999};
       },
       "--betas 1,0.999"},
      {{"adam", "adamw"},
       [](TrainOptions& o) {
         o.betas = std::array<double, 2>{0.9, -0.1};
       },
       "--betas 0.9,-0.1"},
      {{"sgd", "adam", "adamw", "rmsprop", "adagrad"},
       [](TrainOptions& o) { o.lr = -1; },
       "--lr must be finite and >= 0"},
      {{"sgd", "adam"},
       [](TrainOptions& o) {
         o.lr_schedule = "step";
         o.lr_step_size = 10;
         o.lr_gamma = -0.5;
       },
       "--lr-gamma -0.5 is out of range"},
  };
  for (const Case& c : cases) {
    for (const std::string& name : c.optimizers) {
      SCOPED_TRACE(name + ": " + c.needle);
      TrainOptions o;
      o.optimizer = name;
      c.set(o);
      const std::string m = error_of([&] { distop::train::check_options(o, "prog"); });
      EXPECT_NE(m.find("prog"), std::string::npos) << m;
      EXPECT_NE(m.find(c.needle), std::string::npos) << m;
    }
  }
  // In range: no error.
  TrainOptions o;
  o.optimizer = "adam";
  o.betas = std::array<double, 2>{0, 0.5};
  o.eps = 0;
  o.weight_decay = 0;
  EXPECT_NO_THROW(distop::train::check_options(o, "prog"));
}
