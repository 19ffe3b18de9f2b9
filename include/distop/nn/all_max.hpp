#pragma once
// Max all-reduce on the tape (all_min, its counterpart, is in nn/all_min.hpp), with the gradient routed to the rank that held the extremum.

#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// y = the elementwise maximum of x over each group of ranks that share their grid coordinates off
// `axes` of x's partition (the groups AllSumReduce(x.space(), axes) sums over; x's boxes must not
// be split along `axes`). Every member of a group receives the maximum; y lives in x's space.
// One MPI_Allreduce with MPI_MAXLOC on (value, group rank) pairs (MPI_FLOAT_INT, MPI_DOUBLE_INT),
// so every rank learns which member holds each maximum: on ties the lowest group rank (the lowest
// coordinates along `axes`, in row-major order), deterministically.
//
// Not linear, so it is gradient-checked instead of dot-product tested. With a(i) the member that
// holds entry i's maximum, y_r[i] = x_a(i)[i] on every member r, hence
//   dL/dx_q[i] = [a(i) == q] * sum over members r of dL/dy_r[i]:
// backward all-sum-reduces dy over the group (MPI_Allreduce) and keeps the sum on the member that
// held the maximum, zero elsewhere. A NaN entry gives no defined maximum.
//
// Collective over x's partition: every rank of it calls (ranks outside it return at once), in the
// same order; the backward entry, recorded when x requires a gradient, is collective over the
// same groups and runs even where y received no gradient (contributing zeros).
template <class T>
Var<T> all_max(Tape& tape, const Var<T>& x, const std::vector<int>& axes);
}  // namespace distop::nn
