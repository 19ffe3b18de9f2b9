#pragma once
// The per-step breakdown of a training run (--profile): where a step's time goes, from distop's
// timers (core/timers.hpp), for every program that uses train::fit.

#include <mpi.h>

#include <cstdint>
#include <cstdio>

namespace distop::train {

// Prints on rank 0 of `comm` (to `out`) the timers' totals since they were last reset, per step of
// `steps` steps: for each name, milliseconds per step as the mean over the ranks and on the
// slowest rank, and calls per step, in four groups: the phases of a step that train::fit marks
// (step, load, forward, backward, optimizer); the operators' forward applications (the
// communication: Broadcast, SumReduce, HaloExchange, Repartition, AllSumReduce, ...); their
// adjoints (".adjoint", replayed by backward); and the waits in MPI and distop's polling waits
// ("wait <call>", which the operators' times include). The rest of a phase beyond its operators is
// computation. Collective over `comm` (the totals are gathered to rank 0).
void print_profile(MPI_Comm comm, std::int64_t steps, std::FILE* out);

}  // namespace distop::train
