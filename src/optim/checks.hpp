#pragma once
// Internal: the option checks the optimizers share.

#include <cmath>

#include "distop/core/error.hpp"
#include "distop/optim/optimizer.hpp"

namespace distop::optim::detail {

inline void check_non_negative(const char* op, const char* option, double v) {
  DISTOP_CHECK(v >= 0 && std::isfinite(v), op, "option ", option,
               " must be finite and >= 0, found ", v);
}

// The examples' error tests look for "learning rate must be finite".
inline void check_lr(const char* op, double lr) {
  DISTOP_CHECK(lr >= 0 && std::isfinite(lr), op,
               "learning rate must be finite and >= 0 (option lr), found ", lr);
}

inline void check_beta(const char* op, const char* option, double v) {
  DISTOP_CHECK(v >= 0 && v < 1, op, "option ", option, " must lie in [0, 1), found ", v);
}

// A value that torch accepts but that cannot be meant (`fine` false): warned of once per process
// under the key "<op> <option>" (warn_once), not refused. `why` completes "option <option> is <v>,
// ...".
inline void warn_unless(bool fine, const char* op, const char* option, double v, const char* why) {
  if (fine) return;
  warn_once(::distop::detail::concat(op, " ", option),
            ::distop::detail::concat(op, ": option ", option, " is ", v, ", ", why,
                                     " (torch.optim accepts it; distop goes on)"));
}

}  // namespace distop::optim::detail
