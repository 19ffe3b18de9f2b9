#pragma once
// Sums and means of a Var over chosen axes, or of all its entries, on the tape.

#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = the sum (mean) of x over `axes`, as torch.sum(x, dim=axes, keepdim) (torch.mean): axes are
// distinct, at least one, counted from 0 or from the end (-1 is the last). Each reduced axis must
// be unsplit in x's decomposition, so that every rank reduces whole rows of its own box; a
// reduction across ranks is a communicating operator (SumReduce or AllSumReduce in ops/). Anything
// else is an Error naming the axis, alike on every rank.
//
// y's space is x's with the reduced axes removed (or, with keepdim, of extent 1); the other axes
// keep x's split, so y is split as x was. With every axis removed y is the scalar [1], replicated
// over x's partition. Local (no messages). Sums accumulate in double. dx = dy repeated along the
// reduced axes (divided by their element count for mean; the mean over no entries is NaN, as
// torch's).
template <class T>
Var<T> sum(Tape& tape, const Var<T>& x, std::vector<int> axes, bool keepdim = false);
template <class T>
Var<T> mean(Tape& tape, const Var<T>& x, std::vector<int> axes, bool keepdim = false);

// y = the sum (mean) of all of x: a scalar [1] replicated over x's partition, as a loss is. Each
// rank's component is the sum of its own box (for mean, divided by x's global element count), so
// x may be split any way: under the sum convention the components add up to the sum (mean) of the
// whole tensor, each replicated copy counting. For a tensor on one rank, the plain sum (mean).
// Local (no messages). dx = dy (divided by the global element count for mean) on every entry.
template <class T>
Var<T> sum(Tape& tape, const Var<T>& x);
template <class T>
Var<T> mean(Tape& tape, const Var<T>& x);

}  // namespace distop::nn
