#pragma once
// Min all-reduce on the tape, with the gradient routed to the rank that held the minimum.

#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::nn {

// all_max's counterpart (nn/all_max.hpp, which states the contract): y = the elementwise minimum
// of x over each group of ranks that share their grid coordinates off `axes`.
// One MPI_Allreduce with MPI_MINLOC; ties go to the lowest group rank.
template <class T>
Var<T> all_min(Tape& tape, const Var<T>& x, const std::vector<int>& axes);

}  // namespace distop::nn
