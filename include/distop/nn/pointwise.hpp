#pragma once
// Elementwise math functions of Vars on the tape: exp, log, sqrt, rsqrt, clamp and logsigmoid.

#include <optional>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = f(x) entry by entry on every rank's box, as torch's; y lives in x's space, which may be
// decomposed any way. Local (no messages). Recorded when x requires a gradient, adding dy f'(x) to
// x's gradient.

// y = exp(x); dx = dy y (the output is saved).
template <class T>
Var<T> exp(Tape& tape, const Var<T>& x);
// y = log(x); dx = dy / x.
template <class T>
Var<T> log(Tape& tape, const Var<T>& x);
// y = sqrt(x); dx = dy / (2 y) (the output is saved).
template <class T>
Var<T> sqrt(Tape& tape, const Var<T>& x);
// y = 1 / sqrt(x), as torch.rsqrt; dx = -dy y^3 / 2 (the output is saved).
template <class T>
Var<T> rsqrt(Tape& tape, const Var<T>& x);

// y = min(max(x, min), max), a missing bound not applied, as torch.clamp (max wins where
// min > max; NaN stays NaN). Bounds beyond T's range saturate to its infinities. dx = dy where
// min <= x <= max (torch passes the gradient at the bounds), else 0. Neither bound given is an
// Error.
template <class T>
Var<T> clamp(Tape& tape, const Var<T>& x, std::optional<double> min, std::optional<double> max);

// y = log(sigmoid(x)), computed as min(x, 0) - log1p(exp(-|x|)) (no overflow for any x);
// dx = dy sigmoid(-x).
template <class T>
Var<T> logsigmoid(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
