#pragma once
// Learning-rate schedules: constant, step decay and cosine annealing, each optionally after a
// linear warm-up, as pure functions of the step count, and a scheduler that sets every group's
// learning rate of an Optimizer from them.
//
// The learning rate of step t (t = 0, 1, ...: the t-th optimizer step, counted from 0) for a
// group whose base learning rate is b:
//   constant                    lr(t) = b
//   step(S, gamma)              lr(t) = b gamma^floor(t / S)                   (torch's StepLR)
//   cosine(T, eta_min)          lr(t) = eta_min + (b - eta_min) (1 + cos(pi t / T)) / 2 for t <= T,
//                               eta_min for t > T      (torch's CosineAnnealingLR in closed form,
//                               which would rise again after T; this one stays at the end)
//   with_warmup(W, f0) of any   lr(t) = b (f0 + (1 - f0) t / W)  for t < W    (torch's LinearLR
//                               from f0 to 1), then the wrapped schedule at t - W (torch's
//                               SequentialLR with the milestone W); lr(W) = b either way
// Being functions of t alone, a run resumed at step t continues its schedule exactly.

#include <cstdint>
#include <string>
#include <vector>

#include "distop/optim/optimizer.hpp"

namespace distop::optim {

// A schedule's shape, independent of any optimizer. Factories check their arguments (distop::Error
// naming the argument).
class LRSchedule {
 public:
  // lr(t) = b.
  static LRSchedule constant();
  // Decays by `gamma` every `step_size` steps: step_size >= 1, gamma finite and >= 0.
  static LRSchedule step(std::int64_t step_size, double gamma = 0.1);
  // Anneals from b to `eta_min` over `total_steps` steps (>= 1); eta_min finite and >= 0.
  static LRSchedule cosine(std::int64_t total_steps, double eta_min = 0);
  // This schedule after `warmup_steps` (>= 0; 0: none) steps of linear warm-up from the factor
  // `start_factor` (in (0, 1]; torch LinearLR's default 1/3) of b.
  LRSchedule with_warmup(std::int64_t warmup_steps, double start_factor = 1.0 / 3.0) const;

  // The learning rate of step t >= 0 for the base learning rate b.
  double lr(double base_lr, std::int64_t t) const;
  // For messages and logs, e.g. "cosine(T=100, eta_min=0) after a 10-step warm-up from 0.1".
  std::string str() const;

 private:
  enum class Kind { kConstant, kStep, kCosine };
  LRSchedule() = default;
  Kind kind_ = Kind::kConstant;
  std::int64_t period_ = 1;  // step_size, or T
  double value_ = 0;         // gamma, or eta_min
  std::int64_t warmup_ = 0;
  double start_factor_ = 1;
};

// What a checkpoint needs to resume a scheduler: its step count and the base learning rates.
struct LRSchedulerState {
  std::int64_t last_step = 0;
  std::vector<double> base_lrs;
};

// Sets every group's learning rate of an optimizer to schedule.lr(base_lr of the group, t), t
// being the number of step() calls so far (torch's last_epoch): call optimizer.step() and then
// scheduler.step(), as in torch. Refers to the optimizer, which must outlive it.
template <class T>
class LRScheduler {
 public:
  // Takes each group's current learning rate as its base (torch's initial_lr) and sets the
  // learning rates of step 0.
  LRScheduler(Optimizer<T>& optimizer, LRSchedule schedule);

  // t = t + 1, and sets the learning rates of step t.
  void step();
  std::int64_t last_step() const noexcept { return last_step_; }
  // Sets t (>= 0) and the learning rates of step t, as if step() had been called t times.
  void set_step(std::int64_t t);
  const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }
  const LRSchedule& schedule() const noexcept { return schedule_; }

  LRSchedulerState state() const { return {last_step_, base_lrs_}; }
  // Restores t and the base learning rates (one per group, finite and >= 0; distop::Error and no
  // change otherwise) and sets the learning rates of step t.
  void load_state(const LRSchedulerState& state);

 private:
  void apply();
  Optimizer<T>* optimizer_;
  LRSchedule schedule_;
  std::vector<double> base_lrs_;
  std::int64_t last_step_ = 0;
};

extern template class LRScheduler<float>;
extern template class LRScheduler<double>;

}  // namespace distop::optim
