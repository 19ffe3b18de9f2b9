#pragma once
// Internal: a team of threads per row, for the kernels whose work is row by row (softmax,
// normalisation, row sums): the row's entries are spread over the team's threads and reduced with
// TeamThreadRange reductions, so that one long row is not left to one thread. On the host (Serial)
// a team is one thread.

#include <Kokkos_Core.hpp>
#include <climits>
#include <cstdint>

#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

namespace distop::kernels {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;

// One team per row of `rows` (Kokkos numbers teams with an int).
inline TeamPolicy team_per_row(std::int64_t rows, const char* op) {
  DISTOP_CHECK(rows <= INT_MAX, op, rows, " rows exceed the ", INT_MAX,
               " teams a kernel launch can number");
  return TeamPolicy(static_cast<int>(rows), Kokkos::AUTO);
}

}  // namespace distop::kernels
