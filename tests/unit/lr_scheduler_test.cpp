// Learning-rate schedules against their closed forms, and the scheduler that applies them to every
// group of an optimizer, resumable from its state.
#include "distop/optim/lr_scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "distop/dist/dist_tensor.hpp"
#include "distop/nn/linear.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/sgd.hpp"

namespace {

using distop::Var;
namespace optim = distop::optim;
using optim::LRSchedule;

constexpr double kPi = 3.14159265358979323846;

Var<double> parameter() {
  return Var<double>(
      distop::DistTensor<double>(distop::TensorSpace(distop::Shape{2}, distop::Partition::self())),
      true);
}

TEST(LrSchedule, ConstantStepAndCosineMatchTheirClosedForms) {
  const double b = 0.4;
  for (std::int64_t t = 0; t < 50; ++t) {
    EXPECT_EQ(LRSchedule::constant().lr(b, t), b);
    // torch's StepLR: b gamma^floor(t / step_size).
    EXPECT_NEAR(LRSchedule::step(7, 0.5).lr(b, t), b * std::pow(0.5, t / 7), 1e-15) << t;
    // torch's CosineAnnealingLR: eta_min + (b - eta_min)(1 + cos(pi t / T)) / 2, then eta_min.
    const double cosine = t <= 30 ? 0.01 + (b - 0.01) * (1 + std::cos(kPi * t / 30.0)) / 2 : 0.01;
    EXPECT_NEAR(LRSchedule::cosine(30, 0.01).lr(b, t), cosine, 1e-15) << t;
  }
  EXPECT_EQ(LRSchedule::step(7, 0.5).lr(b, 6), b);
  EXPECT_EQ(LRSchedule::step(7, 0.5).lr(b, 7), b * 0.5);
  EXPECT_EQ(LRSchedule::cosine(30).lr(b, 0), b);
  EXPECT_NEAR(LRSchedule::cosine(30).lr(b, 15), b / 2, 1e-15);
  EXPECT_EQ(LRSchedule::cosine(30, 0.01).lr(b, 30), 0.01);
  EXPECT_EQ(LRSchedule::cosine(30, 0.01).lr(b, 1000), 0.01);
}

TEST(LrSchedule, WarmupRisesLinearlyThenRunsTheScheduleFromItsEnd) {
  const double b = 0.3;
  const auto s = LRSchedule::cosine(20, 0.0).with_warmup(5, 0.1);
  for (std::int64_t t = 0; t < 5; ++t)  // torch's LinearLR from 0.1 to 1 over 5 steps
    EXPECT_NEAR(s.lr(b, t), b * (0.1 + 0.9 * t / 5.0), 1e-15) << t;
  for (std::int64_t t = 5; t < 40; ++t)  // then the cosine, counted from the end of the warm-up
    EXPECT_EQ(s.lr(b, t), LRSchedule::cosine(20, 0.0).lr(b, t - 5)) << t;
  EXPECT_EQ(s.lr(b, 5), b);
  const auto st = LRSchedule::step(3, 0.1).with_warmup(4);
  EXPECT_NEAR(st.lr(b, 0), b / 3, 1e-16);  // torch's default start factor, 1/3
  EXPECT_EQ(st.lr(b, 4 + 3), b * 0.1);
  EXPECT_EQ(LRSchedule::constant().with_warmup(0).lr(b, 0), b);
  EXPECT_EQ(LRSchedule::constant().with_warmup(2, 0.5).lr(b, 1), b * 0.75);
  EXPECT_NE(s.str().find("cosine"), std::string::npos);
  EXPECT_NE(s.str().find("warm-up"), std::string::npos);
}

TEST(LrSchedule, BadArgumentsAreErrors) {
  EXPECT_THROW(LRSchedule::step(0), distop::Error);
  EXPECT_THROW(LRSchedule::step(3, -0.1), distop::Error);
  EXPECT_THROW(LRSchedule::cosine(0), distop::Error);
  EXPECT_THROW(LRSchedule::cosine(10, -1), distop::Error);
  EXPECT_THROW(LRSchedule::cosine(10, std::numeric_limits<double>::quiet_NaN()), distop::Error);
  EXPECT_THROW(LRSchedule::constant().with_warmup(-1), distop::Error);
  EXPECT_THROW(LRSchedule::constant().with_warmup(3, 0), distop::Error);
  EXPECT_THROW(LRSchedule::constant().with_warmup(3, 1.5), distop::Error);
  EXPECT_THROW((void)LRSchedule::constant().lr(0.1, -1), distop::Error);
}

TEST(LrScheduler, SetsEveryGroupFromItsBaseRate) {
  auto p = parameter(), q = parameter();
  using Group = optim::Adam<double>::Group;
  optim::Adam<double> opt(std::vector<Group>{{{p}, {.lr = 0.1}}, {{q}, {.lr = 0.02}}});
  const auto schedule = LRSchedule::cosine(10).with_warmup(2);
  optim::LRScheduler<double> scheduler(opt, schedule);
  EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{0.1, 0.02}));
  EXPECT_EQ(scheduler.last_step(), 0);
  for (std::int64_t t = 0; t < 15; ++t) {
    EXPECT_EQ(opt.lr(0), schedule.lr(0.1, t)) << t;
    EXPECT_EQ(opt.lr(1), schedule.lr(0.02, t)) << t;
    opt.step();  // no gradients: nothing moves
    scheduler.step();
  }
  EXPECT_EQ(scheduler.last_step(), 15);
  scheduler.set_step(3);
  EXPECT_EQ(opt.lr(0), schedule.lr(0.1, 3));
  EXPECT_THROW(scheduler.set_step(-1), distop::Error);
}

TEST(LrScheduler, AResumedSchedulerContinuesExactly) {
  auto p = parameter();
  optim::SGD<double> a({p}, {.lr = 0.5});
  optim::LRScheduler<double> sa(a, LRSchedule::step(2, 0.5));
  for (int i = 0; i < 5; ++i) sa.step();
  const auto state = sa.state();
  EXPECT_EQ(state.last_step, 5);

  // A new optimizer whose lr is already the scheduled one (as after load_checkpoint): the
  // scheduler's base rates come from its state, not from the optimizer.
  auto q = parameter();
  optim::SGD<double> b({q}, {.lr = a.lr(0)});
  optim::LRScheduler<double> sb(b, LRSchedule::step(2, 0.5));
  sb.load_state(state);
  EXPECT_EQ(sb.base_lrs(), std::vector<double>{0.5});
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b.lr(0), a.lr(0));
    sa.step();
    sb.step();
  }
  EXPECT_THROW(sb.load_state({.last_step = 1, .base_lrs = {0.1, 0.2}}), distop::Error);
  EXPECT_THROW(sb.load_state({.last_step = -1, .base_lrs = {0.1}}), distop::Error);
  EXPECT_THROW(sb.load_state({.last_step = 1, .base_lrs = {-0.1}}), distop::Error);
  EXPECT_EQ(sb.last_step(), 9);
}

}  // namespace

namespace {

// docs/models.md's example.
TEST(LRScheduler, DocsExampleWarmsUpFromAThird) {
  distop::nn::Linear<float> model(4, 2);
  const std::int64_t total_steps = 10000;
  namespace optim = distop::optim;
  // [schedule]
  optim::AdamW<float> opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.05});
  optim::LRScheduler<float> schedule(opt, optim::LRSchedule::cosine(total_steps).with_warmup(500));
  // each step: backward, opt.step(), opt.zero_grad(), schedule.step()
  // [schedule]
  EXPECT_DOUBLE_EQ(opt.lr(0), 3e-4 / 3);
  schedule.set_step(500);
  EXPECT_DOUBLE_EQ(opt.lr(0), 3e-4);
}

}  // namespace
