#pragma once
// Internal: the option checks the optimizers share.

#include <cmath>

#include "distop/core/error.hpp"

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

}  // namespace distop::optim::detail
