#pragma once
// Row-wise L2 normalisation of a Var on the tape.

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = x / max(||x||_2, eps) over the last axis, as torch.nn.functional.normalize(x, p=2, dim=-1,
// eps): a zero row stays zero. x is [..., n] with the last axis unsplit (each row on one rank); the
// others may be split any way. y lives in x's space. Local (no messages). Norms are accumulated in
// double. dx = (dy - y (y . dy)) / ||x|| on rows where ||x|| >= eps, dy / eps on the others (where
// the denominator is the constant eps, as torch's clamp_min passes no gradient below it). An x
// whose last axis is split is an Error.
template <class T>
Var<T> normalize(Tape& tape, const Var<T>& x, double eps = 1e-12);

}  // namespace distop::nn
