#pragma once
// Internal: a team of threads per row, for the kernels whose work is row by row (softmax,
// normalisation, row sums): each of the team's threads takes the row's entries team-size apart (so
// that neighbouring threads read neighbouring entries on a GPU) into its own partial sum or
// maximum, and the team joins the partials with a Kokkos::Sum or Kokkos::Max team reduction, so
// that one long row is not left to one thread. On the host (Serial) a team is one thread, and this
// is a plain loop over the row, the same arithmetic in the same order as one thread per row.
//
// The loops are written out rather than given to Kokkos' TeamThreadRange reductions: on the host
// those keep the accumulator in memory (its address goes to the reducer), and softmax then took
// 15-20 % longer than one thread per row on rows of every length (bench_softmax). For the same
// reason the join is a function of its own, not inlined: inlined, the compiler gave the thread's
// running value the memory home of the variable the reduction takes the address of.

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

// The team-wide sum and maximum of each thread's partial value, which every thread gets.
__attribute__((noinline)) KOKKOS_FUNCTION inline double team_join_sum(const TeamMember& team,
                                                                      double partial) {
  team.team_reduce(Kokkos::Sum<double>(partial));
  return partial;
}
__attribute__((noinline)) KOKKOS_FUNCTION inline double team_join_max(const TeamMember& team,
                                                                      double partial) {
  team.team_reduce(Kokkos::Max<double>(partial));
  return partial;
}

// The sum of f(j) over j in [0, n), in double, shared by the team's threads (every thread gets it).
template <class F>
KOKKOS_INLINE_FUNCTION double team_sum(const TeamMember& team, std::int64_t n, const F& f) {
  const std::int64_t t = team.team_size();
  double sum = 0;
  for (std::int64_t j = team.team_rank(); j < n; j += t) sum += f(j);
  return t == 1 ? sum : team_join_sum(team, sum);
}

// The maximum of f(j) over j in [0, n) (Kokkos' -DBL_MAX for none; a NaN is passed over), shared
// by the team's threads.
template <class F>
KOKKOS_INLINE_FUNCTION double team_max(const TeamMember& team, std::int64_t n, const F& f) {
  const std::int64_t t = team.team_size();
  double max = Kokkos::reduction_identity<double>::max();
  for (std::int64_t j = team.team_rank(); j < n; j += t) {
    const double v = f(j);
    max = v > max ? v : max;
  }
  return t == 1 ? max : team_join_max(team, max);
}

// f(j) for every j in [0, n), the entries shared out among the team's threads as above.
template <class F>
KOKKOS_INLINE_FUNCTION void team_for(const TeamMember& team, std::int64_t n, const F& f) {
  const std::int64_t t = team.team_size();
  for (std::int64_t j = team.team_rank(); j < n; j += t) f(j);
}

}  // namespace distop::kernels
