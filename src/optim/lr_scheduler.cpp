#include "distop/optim/lr_scheduler.hpp"

#include <cmath>
#include <sstream>
#include <utility>

#include "distop/core/error.hpp"

namespace distop::optim {

namespace {
constexpr const char* kOp = "LRSchedule";
constexpr double kPi = 3.14159265358979323846;
}  // namespace

LRSchedule LRSchedule::constant() { return LRSchedule(); }

LRSchedule LRSchedule::step(std::int64_t step_size, double gamma) {
  DISTOP_CHECK(step_size >= 1, kOp, "step_size must be >= 1, found ", step_size);
  DISTOP_CHECK(std::isfinite(gamma) && gamma >= 0, kOp, "gamma must be finite and >= 0, found ",
               gamma);
  LRSchedule s;
  s.kind_ = Kind::kStep;
  s.period_ = step_size;
  s.value_ = gamma;
  return s;
}

LRSchedule LRSchedule::cosine(std::int64_t total_steps, double eta_min) {
  DISTOP_CHECK(total_steps >= 1, kOp, "the cosine schedule's total_steps must be >= 1, found ",
               total_steps);
  DISTOP_CHECK(std::isfinite(eta_min) && eta_min >= 0, kOp,
               "eta_min must be finite and >= 0, found ", eta_min);
  LRSchedule s;
  s.kind_ = Kind::kCosine;
  s.period_ = total_steps;
  s.value_ = eta_min;
  return s;
}

LRSchedule LRSchedule::with_warmup(std::int64_t warmup_steps, double start_factor) const {
  DISTOP_CHECK(warmup_steps >= 0, kOp, "warmup_steps must be >= 0, found ", warmup_steps);
  DISTOP_CHECK(start_factor > 0 && start_factor <= 1, kOp,
               "the warm-up's start_factor must lie in (0, 1], found ", start_factor);
  LRSchedule s = *this;
  s.warmup_ = warmup_steps;
  s.start_factor_ = start_factor;
  return s;
}

double LRSchedule::lr(double base_lr, std::int64_t t) const {
  DISTOP_CHECK(t >= 0, kOp, "the step must be >= 0, found ", t);
  if (t < warmup_)
    return base_lr * (start_factor_ +
                      (1 - start_factor_) * static_cast<double>(t) / static_cast<double>(warmup_));
  t -= warmup_;
  switch (kind_) {
    case Kind::kConstant:
      return base_lr;
    case Kind::kStep:
      return base_lr * std::pow(value_, static_cast<double>(t / period_));
    case Kind::kCosine:
      if (t >= period_) return value_;
      return value_ +
             (base_lr - value_) *
                 (1 + std::cos(kPi * static_cast<double>(t) / static_cast<double>(period_))) / 2;
  }
  return base_lr;
}

std::string LRSchedule::str() const {
  std::ostringstream os;
  switch (kind_) {
    case Kind::kConstant:
      os << "constant";
      break;
    case Kind::kStep:
      os << "step(step_size=" << period_ << ", gamma=" << value_ << ")";
      break;
    case Kind::kCosine:
      os << "cosine(T=" << period_ << ", eta_min=" << value_ << ")";
      break;
  }
  if (warmup_ > 0) os << " after a " << warmup_ << "-step warm-up from " << start_factor_;
  return os.str();
}

template <class T>
LRScheduler<T>::LRScheduler(Optimizer<T>& optimizer, LRSchedule schedule)
    : optimizer_(&optimizer), schedule_(std::move(schedule)) {
  for (std::size_t g = 0; g < optimizer.group_count(); ++g) base_lrs_.push_back(optimizer.lr(g));
  apply();
}

template <class T>
void LRScheduler<T>::step() {
  ++last_step_;
  apply();
}

template <class T>
void LRScheduler<T>::set_step(std::int64_t t) {
  DISTOP_CHECK(t >= 0, "LRScheduler::set_step", "the step must be >= 0, found ", t);
  last_step_ = t;
  apply();
}

template <class T>
void LRScheduler<T>::load_state(const LRSchedulerState& state) {
  constexpr const char* op = "LRScheduler::load_state";
  DISTOP_CHECK(state.last_step >= 0, op, "the step must be >= 0, found ", state.last_step);
  DISTOP_CHECK(state.base_lrs.size() == optimizer_->group_count(), op, "the state has ",
               state.base_lrs.size(), " base learning rates, the optimizer ",
               optimizer_->group_count(), " parameter groups");
  for (double b : state.base_lrs)
    DISTOP_CHECK(std::isfinite(b) && b >= 0, op,
                 "a base learning rate must be finite and >= 0, found ", b);
  base_lrs_ = state.base_lrs;
  last_step_ = state.last_step;
  apply();
}

template <class T>
void LRScheduler<T>::apply() {
  for (std::size_t g = 0; g < base_lrs_.size(); ++g)
    optimizer_->set_lr(g, schedule_.lr(base_lrs_[g], last_step_));
}

template class LRScheduler<float>;
template class LRScheduler<double>;

}  // namespace distop::optim
