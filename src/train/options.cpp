#include "distop/train/options.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "distop/core/error.hpp"
#include "distop/optim/adagrad.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/rmsprop.hpp"
#include "distop/optim/sgd.hpp"

namespace distop::train {

namespace {

// The flags each setting comes from, and the optimizers that have it.
struct Applicability {
  const char* flag;
  bool given;
  std::vector<std::string> optimizers;
};

// The optimizer's settings within the ranges torch.optim accepts (as the optimizers check them,
// but naming the flag), and a warning, once, for values it accepts that cannot be meant, under the
// optimizer's key (optim::warn_once), so that the optimizer does not warn again. Only the flags
// that apply to o.optimizer are given (check_options has checked that).
void check_optimizer_ranges(const TrainOptions& o, const std::string& program) {
  const char* name = o.optimizer == "sgd"       ? optim::SGDRule::kName
                     : o.optimizer == "rmsprop" ? optim::RMSpropRule::kName
                     : o.optimizer == "adam"    ? optim::AdamRule::kName
                     : o.optimizer == "adamw"   ? optim::AdamWRule::kName
                                                : optim::AdagradRule::kName;
  const auto at_least_0 = [&](const char* flag, const std::optional<double>& v) {
    DISTOP_CHECK(!v || *v >= 0, program, flag, " ", *v, " is out of range: ", name, "'s ", flag + 2,
                 " must be >= 0 (as torch.optim's)");
  };
  at_least_0("--momentum", o.momentum);
  at_least_0("--weight-decay", o.weight_decay);
  at_least_0("--eps", o.eps);
  at_least_0("--alpha", o.alpha);
  if (o.betas)
    for (int i = 0; i < 2; ++i)
      DISTOP_CHECK((*o.betas)[i] >= 0 && (*o.betas)[i] < 1, program, "--betas ", (*o.betas)[0], ",",
                   (*o.betas)[1], " is out of range: ", name, "'s beta", i + 1,
                   " must lie in [0, 1) (as torch.optim's)");
  const auto warn = [&](const char* flag, const char* option, double v, const char* why) {
    optim::warn_once(
        distop::detail::concat(name, " ", option),
        distop::detail::concat(program, ": ", flag, " ", v, " ", why, " (torch.optim's ", name,
                               " accepts it; training goes on)"));
  };
  if (o.momentum && *o.momentum > 1)
    warn("--momentum", "momentum", *o.momentum,
         "is above 1: the momentum buffer, and with it each update, grows geometrically");
  if (o.alpha && *o.alpha >= 1)
    warn("--alpha", "alpha", *o.alpha,
         "is not below 1: the running average of squared gradients then never takes them in (1) "
         "or turns negative (above 1), and the updates divide by eps or become NaN");
}

}  // namespace

void check_options(const TrainOptions& o, const std::string& program) {
  const std::vector<std::string> optimizers{"sgd", "adam", "adamw", "rmsprop", "adagrad"};
  DISTOP_CHECK(std::find(optimizers.begin(), optimizers.end(), o.optimizer) != optimizers.end(),
               program, "--optimizer ", o.optimizer,
               " is not one of sgd, adam, adamw, rmsprop, adagrad");
  DISTOP_CHECK(o.batch_size >= 1, program, "--batch-size must be at least 1, found ", o.batch_size);
  DISTOP_CHECK(o.replicas >= 1, program, "--replicas must be at least 1, found ", o.replicas);
  DISTOP_CHECK(o.zero >= 0 && o.zero <= 2, program, "--zero must be 0, 1 or 2, found ", o.zero);
  DISTOP_CHECK(o.epochs >= 0 && o.steps >= 0 && o.checkpoint_every >= 0 && o.warmup_steps >= 0,
               program,
               "--epochs, --steps, --checkpoint-every and --warmup-steps must be non-negative");
  DISTOP_CHECK(std::isfinite(o.lr) && o.lr >= 0, program, "--lr must be finite and >= 0, found ",
               o.lr);
  const Applicability rules[] = {
      {"--momentum", o.momentum.has_value(), {"sgd", "rmsprop"}},
      {"--betas", o.betas.has_value(), {"adam", "adamw"}},
      {"--eps", o.eps.has_value(), {"adam", "adamw", "rmsprop", "adagrad"}},
      {"--alpha", o.alpha.has_value(), {"rmsprop"}},
      {"--nesterov", o.nesterov, {"sgd"}},
      {"--amsgrad", o.amsgrad, {"adam", "adamw"}},
      {"--centered", o.centered, {"rmsprop"}},
  };
  for (const auto& r : rules) {
    if (!r.given) continue;
    const bool applies =
        std::find(r.optimizers.begin(), r.optimizers.end(), o.optimizer) != r.optimizers.end();
    std::string list;
    for (const auto& name : r.optimizers) list += (list.empty() ? "" : ", ") + name;
    DISTOP_CHECK(applies, program, r.flag, " does not apply to --optimizer ", o.optimizer,
                 " (it applies to ", list, ")");
  }
  check_optimizer_ranges(o, program);
  const std::vector<std::string> schedules{"constant", "cosine", "step"};
  DISTOP_CHECK(std::find(schedules.begin(), schedules.end(), o.lr_schedule) != schedules.end(),
               program, "--lr-schedule ", o.lr_schedule, " is not one of constant, cosine, step");
  DISTOP_CHECK(o.lr_schedule != "step" || o.lr_step_size >= 1, program,
               "--lr-schedule step needs --lr-step-size of at least 1");
  DISTOP_CHECK(o.lr_schedule == "step" || o.lr_step_size == 0, program,
               "--lr-step-size applies to --lr-schedule step only");
  DISTOP_CHECK(o.lr_schedule != "step" || (std::isfinite(o.lr_gamma) && o.lr_gamma >= 0), program,
               "--lr-gamma ", o.lr_gamma,
               " is out of range: it must be finite and >= 0 (a negative one makes the learning "
               "rate negative, which every optimizer refuses)");
  DISTOP_CHECK(!o.resume || !o.checkpoint_dir.empty(), program, "--resume needs --checkpoint-dir");
  DISTOP_CHECK(!(o.resume && !o.init.empty()), program,
               "--resume and --init both set the weights; give one of them");
}

void check_fits_in_memory(const std::string& program, const std::string& setting, double bytes) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;  // unknown: not checked
  const double memory = static_cast<double>(pages) * static_cast<double>(page);
  char need[32], have[32];
  std::snprintf(need, sizeof need, "%.0f", bytes);
  std::snprintf(have, sizeof have, "%.0f", memory);
  DISTOP_CHECK(bytes <= memory, program, setting, " needs ", need,
               " bytes per rank, more than the ", have, " bytes of this machine's memory");
}

template <class T>
std::unique_ptr<optim::Optimizer<T>> make_optimizer(const TrainOptions& o,
                                                    std::vector<Var<T>> parameters) {
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::SGD<T>>(
        std::move(parameters),
        optim::SGDOptions{.lr = o.lr,
                          .momentum = o.momentum.value_or(o.default_sgd_momentum),
                          .weight_decay = o.weight_decay.value_or(0),
                          .nesterov = o.nesterov});
  }
  if (o.optimizer == "adam" || o.optimizer == "adamw") {
    const auto betas = o.betas.value_or(std::array<double, 2>{0.9, 0.999});
    if (o.optimizer == "adam")
      return std::make_unique<optim::Adam<T>>(
          std::move(parameters), optim::AdamOptions{.lr = o.lr,
                                                    .betas = betas,
                                                    .eps = o.eps.value_or(1e-8),
                                                    .weight_decay = o.weight_decay.value_or(0),
                                                    .amsgrad = o.amsgrad});
    return std::make_unique<optim::AdamW<T>>(
        std::move(parameters), optim::AdamWOptions{.lr = o.lr,
                                                   .betas = betas,
                                                   .eps = o.eps.value_or(1e-8),
                                                   .weight_decay = o.weight_decay.value_or(1e-2),
                                                   .amsgrad = o.amsgrad});
  }
  if (o.optimizer == "rmsprop")
    return std::make_unique<optim::RMSprop<T>>(
        std::move(parameters), optim::RMSpropOptions{.lr = o.lr,
                                                     .alpha = o.alpha.value_or(0.99),
                                                     .eps = o.eps.value_or(1e-8),
                                                     .weight_decay = o.weight_decay.value_or(0),
                                                     .momentum = o.momentum.value_or(0),
                                                     .centered = o.centered});
  DISTOP_CHECK(o.optimizer == "adagrad", "make_optimizer", "unknown optimizer ", o.optimizer);
  return std::make_unique<optim::Adagrad<T>>(
      std::move(parameters),
      optim::AdagradOptions{
          .lr = o.lr, .weight_decay = o.weight_decay.value_or(0), .eps = o.eps.value_or(1e-10)});
}

template std::unique_ptr<optim::Optimizer<float>> make_optimizer(const TrainOptions&,
                                                                 std::vector<Var<float>>);
template std::unique_ptr<optim::Optimizer<double>> make_optimizer(const TrainOptions&,
                                                                  std::vector<Var<double>>);

optim::LRSchedule make_schedule(const TrainOptions& o, std::int64_t total_steps) {
  optim::LRSchedule s = optim::LRSchedule::constant();
  const std::int64_t after_warmup = std::max<std::int64_t>(total_steps - o.warmup_steps, 1);
  if (o.lr_schedule == "cosine")
    s = optim::LRSchedule::cosine(after_warmup);
  else if (o.lr_schedule == "step")
    s = optim::LRSchedule::step(o.lr_step_size, o.lr_gamma);
  return o.warmup_steps > 0 ? s.with_warmup(o.warmup_steps) : s;
}

}  // namespace distop::train
